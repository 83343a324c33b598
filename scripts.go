package redisdelay

import (
	"embed"
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts are the heart of the adapter: one file per command in lua/, each with a header
// that lists its KEYS and ARGV, and shared fragments in lua/lib/, one function each. This file
// owns the table of scripts and assembles each from its fragments.
//
// The data model they share: all times are Unix microseconds on the Redis clock (exact integers
// in a Lua double until the year 2255). A message of a topic has an internal ID: 12 hex digits,
// so IDs sort in publish order, followed for a keyed message by "=" and its key. In a consumer
// group it is a member of the due or the lease sorted set, named
//
//	ID          due, never claimed, stored in the messages hash
//	ID|message  due, never claimed, the only group of its topic (or parked for the first group):
//	            the marshaled message is part of the member, saving a hash entry; never while
//	            the new-group window keeps the message too (see register.lua)
//	ID:N        due after N attempts, or leased for attempt N; a keyed ID always has the :N, so
//	            the member of a keyed message is known from its key and attempt count
//
// so the attempt count travels with the message, and ID:N is the lease's fencing token: once a
// lease expired and another consumer claimed attempt N+1, no command of the old holder matches.
// The Inspector names a member ID|message by its short form "ID|" and its score (see
// lua/lib/position.lua), so that a list or a ref never carries the whole message.
// A claimed message is always in the messages hash until its group is done with it. The hash
// field of a message is its ID, or for a keyed message "=" and the key, whose value starts with
// the ID's 12 hex digits: so the key finds its message, and a key is taken while the field
// exists. A group's lease set also holds a marker member, "~lease-set-marker~" and tildes to 80
// bytes, scored +inf, written by every claim: a member longer than zset-max-listpack-value (64
// by default) keeps the set in Redis's skiplist encoding. In the listpack encoding that Redis
// gives a sorted set of up to 128 short members, every insert and lookup is a linear scan: a
// claim of 100 leases cost 1.5 µs of Redis time per ZADD member and an ack's ZMSCORE 0.8 µs,
// against 0.2 and 0.3 µs in a skiplist. Every reader of a lease set leaves the marker out by
// reading scores below 1e300 ("(1e300"; every due time and lease deadline, in µs, is far below;
// miniredis does not leave +inf out of "(+inf"). Each group keeps a keyed hash, key -> member, for the keyed messages it claimed, so
// that the attempt count, hence the member, of a keyed message is known in every group.

//go:embed lua/*.lua lua/lib/*.lua
var luaFiles embed.FS

// scriptSpec names a script's file, the fragments of lua/lib it uses, how many KEYS it takes
// (the least, when variadic), and whether it may run on a full Redis.
type scriptSpec struct {
	file      string
	fragments []string
	keys      int
	variadic  bool
	allowOOM  bool
}

var (
	// publishScript has no allow-oom flag: a full Redis refuses it before it writes anything.
	// Every script that drains the queue may run on a full Redis, so that consumers can always
	// empty it.
	publishScript    = mustScript(scriptSpec{file: "publish", fragments: []string{"publish_to"}, keys: 9, variadic: true})
	claimScript      = mustScript(scriptSpec{file: "claim", fragments: []string{"now_us", "split", "member", "each_chunk", "stored", "head", "ack", "close_batch"}, keys: 10, allowOOM: true})
	ackScript        = mustScript(scriptSpec{file: "ack", fragments: []string{"ack"}, keys: 5, allowOOM: true})
	releaseScript    = mustScript(scriptSpec{file: "release", fragments: []string{"now_us", "split", "member", "each_chunk", "schedule", "held"}, keys: 4, allowOOM: true})
	nackScript       = mustScript(scriptSpec{file: "nack", fragments: []string{"now_us", "split", "member", "schedule", "drop"}, keys: 6, allowOOM: true})
	extendScript     = mustScript(scriptSpec{file: "extend", fragments: []string{"now_us", "split", "each_chunk", "held"}, keys: 1, allowOOM: true})
	deadLetterScript = mustScript(scriptSpec{file: "deadletter", fragments: []string{"now_us", "publish_to", "drop", "ended"}, keys: 14, variadic: true, allowOOM: true})
	registerScript   = mustScript(scriptSpec{file: "register", fragments: []string{"split", "hmget", "each_chunk", "head", "wake", "drop_parked"}, keys: 9, allowOOM: true})
	// closeWindowScript only frees memory, so it may run on a full Redis.
	closeWindowScript = mustScript(scriptSpec{file: "closewindow", fragments: []string{"drop_parked"}, keys: 6, allowOOM: true})
	// deadLetterPublishScript is publish.lua for the first step of a move to a dead-letter topic
	// in another hash slot; like the rest of dead-lettering, it may run on a full Redis.
	deadLetterPublishScript = mustScript(scriptSpec{file: "publish", fragments: []string{"publish_to"}, keys: 9, variadic: true, allowOOM: true})
	// cancelScript may run on a full Redis, since it frees memory; rescheduleScript may not.
	cancelScript     = mustScript(scriptSpec{file: "cancel", fragments: []string{"now_us", "locate", "ended", "drop", "stale"}, keys: 6, variadic: true, allowOOM: true})
	rescheduleScript = mustScript(scriptSpec{file: "reschedule", fragments: []string{"now_us", "locate", "schedule", "stale"}, keys: 5, variadic: true})
	statusScript     = mustScript(scriptSpec{file: "status", fragments: []string{"locate"}, keys: 3, variadic: true, allowOOM: true})
	// The Inspector's scripts. Those that only read or free memory may run on a full Redis.
	pauseScript       = mustScript(scriptSpec{file: "pause", fragments: []string{"now_us", "wake"}, keys: 2, allowOOM: true})
	removeGroupScript = mustScript(scriptSpec{file: "removegroup", fragments: []string{"split", "each_chunk", "drop", "close_batch", "wake", "drop_parked"}, keys: 15, allowOOM: true})
	statsScript       = mustScript(scriptSpec{file: "stats", fragments: []string{"now_us", "head"}, keys: 4, variadic: true, allowOOM: true})
	listScript        = mustScript(scriptSpec{file: "list", fragments: []string{"now_us", "split", "position"}, keys: 2, allowOOM: true})
	showScript        = mustScript(scriptSpec{file: "show", fragments: []string{"now_us", "split", "stored", "position"}, keys: 3, allowOOM: true})
	resolveScript     = mustScript(scriptSpec{file: "resolve", fragments: []string{"position"}, keys: 1, allowOOM: true})
	purgeScript       = mustScript(scriptSpec{file: "purge", fragments: []string{"now_us", "split", "each_chunk", "drop", "close_batch"}, keys: 7, allowOOM: true})
	flushBatchScript  = mustScript(scriptSpec{file: "flushbatch", fragments: []string{"now_us", "wake", "stale", "seal_batch"}, keys: 7, variadic: true, allowOOM: true})
	refOpScript       = mustScript(scriptSpec{file: "refop", fragments: []string{"now_us", "split", "schedule", "drop", "ended", "close_batch"}, keys: 9, allowOOM: true})
	requeueScript     = mustScript(scriptSpec{file: "requeue", fragments: []string{"now_us", "split", "each_chunk", "hmget", "stored", "schedule"}, keys: 7, variadic: true})
)

// script is one Lua script in two forms. Redis 7 reads flags from a shebang line: allow-oom lets
// a script run when used memory is above maxmemory, and a flagged script without it is refused
// before it runs. Servers without shebang support (Redis 6.2, miniredis) get the plain form,
// which Redis lets run until its first write that could grow memory.
type script struct {
	name     string
	keys     int
	variadic bool
	flagged  *redis.Script
	plain    *redis.Script
}

// checkKeys reports a call with the wrong number of keys, which Redis Cluster could not route
// or the script would misread.
func (sc *script) checkKeys(keys []string) error {
	if len(keys) == sc.keys || sc.variadic && len(keys) >= sc.keys {
		return nil
	}
	return fmt.Errorf("script %s: %d keys, want %d", sc.name, len(keys), sc.keys)
}

var (
	fragmentNeeds = regexp.MustCompile(`^-- fragment (\w+); needs: (.*)\n`)
	definedName   = regexp.MustCompile(`(?m)^local (?:function )?(\w+)`)
	lineComment   = regexp.MustCompile(`--.*`)
)

// shebangSupport is set once a server has refused a shebang line. It is per Publisher or
// Subscriber, so one process may talk to servers of both kinds.
type shebangSupport struct{ unsupported atomic.Bool }

// fragment is one file of lua/lib: the names it defines and the fragments it needs.
type fragment struct {
	body    string
	defines []string
	needs   []string
}

// fragmentOrder is the order fragments are put together in: each after those it needs.
var fragmentOrder = []string{"now_us", "split", "position", "member", "each_chunk", "hmget", "stored", "head", "wake", "schedule", "held", "locate", "drop", "ended", "ack", "stale", "seal_batch", "close_batch", "drop_parked", "publish_to"}

// mustScript assembles a script from its file and the fragments it names, with the fragments
// they need, and checks that every fragment name a script or fragment uses is included. A
// mistake in the table is a bug in the adapter, so it panics when the package loads.
func mustScript(spec scriptSpec) *script {
	sc, err := assemble(spec)
	if err != nil {
		panic("redisdelay: " + err.Error())
	}
	return sc
}

func assemble(spec scriptSpec) (*script, error) {
	body, err := luaFiles.ReadFile(path.Join("lua", spec.file+".lua"))
	if err != nil {
		return nil, err
	}
	frags := map[string]fragment{}
	for _, name := range fragmentOrder {
		if frags[name], err = readFragment(name); err != nil {
			return nil, err
		}
	}
	included, err := includedFragments(spec, frags)
	if err != nil {
		return nil, err
	}
	var lib strings.Builder
	for _, name := range fragmentOrder {
		if included[name] {
			lib.WriteString(frags[name].body + "\n")
		}
	}
	code := lib.String() + string(body)
	// Every fragment name used must be defined by an included fragment: an undefined local
	// would be a global lookup, which Redis refuses at run time.
	uncommented := lineComment.ReplaceAllString(code, "")
	for name, f := range frags {
		for _, def := range f.defines {
			if !included[name] && regexp.MustCompile(`\b`+def+`\b`).MatchString(uncommented) {
				return nil, fmt.Errorf("script %s uses %s of fragment %q, which it does not list", spec.file, def, name)
			}
		}
	}
	shebang := "#!lua\n"
	if spec.allowOOM {
		shebang = "#!lua flags=allow-oom\n"
	}
	return &script{
		name:     spec.file,
		keys:     spec.keys,
		variadic: spec.variadic,
		flagged:  redis.NewScript(shebang + code),
		plain:    redis.NewScript(code),
	}, nil
}

// includedFragments returns the fragments spec lists and, transitively, those they need.
func includedFragments(spec scriptSpec, frags map[string]fragment) (map[string]bool, error) {
	included := map[string]bool{}
	var add func(name, by string) error
	add = func(name, by string) error {
		f, ok := frags[name]
		if !ok {
			return fmt.Errorf("script %s: unknown fragment %q (needed by %q)", spec.file, name, by)
		}
		included[name] = true
		for _, n := range f.needs {
			if err := add(n, name); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range spec.fragments {
		if err := add(name, spec.file); err != nil {
			return nil, err
		}
	}
	return included, nil
}

func readFragment(name string) (fragment, error) {
	data, err := luaFiles.ReadFile(path.Join("lua", "lib", name+".lua"))
	if err != nil {
		return fragment{}, err
	}
	m := fragmentNeeds.FindStringSubmatch(string(data))
	if m == nil || m[1] != name {
		return fragment{}, fmt.Errorf("fragment %s: the first line must be \"-- fragment %s; needs: ...\"", name, name)
	}
	f := fragment{body: string(data)}
	if m[2] != "nothing" {
		f.needs = strings.Split(m[2], ", ")
	}
	for _, d := range definedName.FindAllStringSubmatch(string(data), -1) {
		f.defines = append(f.defines, d[1])
	}
	return f, nil
}
