package store

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// The Lua scripts are the heart of the adapter: one file per command in lua/, each with a header
// that names the fragments it uses and lists its KEYS and ARGV (see parseHeader), and shared
// fragments in lua/lib/, one function each. This file owns the table of scripts and assembles
// each from its fragments.
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
// exists. A group's lease set also holds a marker member, "~lease-set-marker~", the group's
// epoch and tildes to 80 bytes, scored +inf, written by every claim: it fences the acks, nacks,
// extensions and releases of another registration out (see lua/lib/lease_marker.lua), and a
// member longer than zset-max-listpack-value (64 by default) keeps the set in Redis's skiplist
// encoding. In the listpack encoding that Redis
// gives a sorted set of up to 128 short members, every insert and lookup is a linear scan: a
// claim of 100 leases cost 1.5 µs of Redis time per ZADD member and an ack's ZMSCORE 0.8 µs,
// against 0.2 and 0.3 µs in a skiplist. Every reader of a lease set leaves the marker out by
// reading scores below 1e300 ("(1e300"; every due time and lease deadline, in µs, is far below;
// miniredis does not leave +inf out of "(+inf"). Each group keeps a keyed hash, key -> member, for the keyed messages it claimed, so
// that the attempt count, hence the member, of a keyed message is known in every group.

//go:embed lua/*.lua lua/lib/*.lua
var luaFiles embed.FS

// scriptSpec names a script's file and whether it may run on a full Redis: what differs per
// use of a file. The rest, its fragments and its keys, the file's header declares (see
// parseHeader).
type scriptSpec struct {
	file     string
	allowOOM bool
}

var (
	// publishScript has no allow-oom flag: a full Redis refuses it before it writes anything.
	// Every script that drains the queue may run on a full Redis, so that consumers can always
	// empty it.
	publishScript    = mustScript(scriptSpec{file: "publish"})
	claimScript      = mustScript(scriptSpec{file: "claim", allowOOM: true})
	ackScript        = mustScript(scriptSpec{file: "ack", allowOOM: true})
	releaseScript    = mustScript(scriptSpec{file: "release", allowOOM: true})
	nackScript       = mustScript(scriptSpec{file: "nack", allowOOM: true})
	extendScript     = mustScript(scriptSpec{file: "extend", allowOOM: true})
	deadLetterScript = mustScript(scriptSpec{file: "deadletter", allowOOM: true})
	registerScript   = mustScript(scriptSpec{file: "register", allowOOM: true})
	// closeWindowScript only frees memory, so it may run on a full Redis.
	closeWindowScript = mustScript(scriptSpec{file: "closewindow", allowOOM: true})
	// deadLetterPublishScript is publish.lua for the first step of a move to a dead-letter topic
	// in another hash slot; like the rest of dead-lettering, it may run on a full Redis.
	deadLetterPublishScript = mustScript(scriptSpec{file: "publish", allowOOM: true})
	// cancelScript may run on a full Redis, since it frees memory; rescheduleScript may not.
	cancelScript     = mustScript(scriptSpec{file: "cancel", allowOOM: true})
	rescheduleScript = mustScript(scriptSpec{file: "reschedule"})
	statusScript     = mustScript(scriptSpec{file: "status", allowOOM: true})
	// The Inspector's scripts. Those that only read or free memory may run on a full Redis.
	pauseScript       = mustScript(scriptSpec{file: "pause", allowOOM: true})
	removeGroupScript = mustScript(scriptSpec{file: "removegroup", allowOOM: true})
	statsScript       = mustScript(scriptSpec{file: "stats", allowOOM: true})
	listScript        = mustScript(scriptSpec{file: "list", allowOOM: true})
	listFarScript     = mustScript(scriptSpec{file: "listfar", allowOOM: true})
	showScript        = mustScript(scriptSpec{file: "show", allowOOM: true})
	// unfarScript moves one message within a group's keys, from the compact tier to the due
	// set: it may run on a full Redis, as the operation by ref that follows may.
	unfarScript      = mustScript(scriptSpec{file: "unfar", allowOOM: true})
	resolveScript    = mustScript(scriptSpec{file: "resolve", allowOOM: true})
	purgeScript      = mustScript(scriptSpec{file: "purge", allowOOM: true})
	flushBatchScript = mustScript(scriptSpec{file: "flushbatch", allowOOM: true})
	refOpScript      = mustScript(scriptSpec{file: "refop", allowOOM: true})
	requeueScript    = mustScript(scriptSpec{file: "requeue"})
)

// script is one Lua script in two forms. Redis 7 reads flags from a shebang line: allow-oom lets
// a script run when used memory is above maxmemory, and a flagged script without it is refused
// before it runs. Servers without shebang support (Redis 6.2, miniredis) get the plain form,
// which Redis lets run until its first write that could grow memory.
type script struct {
	name     string
	keys     int
	variadic bool
	flagged  scriptForm
	plain    scriptForm
}

// scriptForm is one form of a script: its source, and its SHA1 (hex) that EVALSHA names it by.
// Both are kept as interface values, boxed once here rather than on every call.
type scriptForm struct {
	src, sha any
}

func newScriptForm(src string) scriptForm {
	sum := sha1.Sum([]byte(src))
	return scriptForm{src: src, sha: hex.EncodeToString(sum[:])}
}

// checkKeys reports a call with the wrong number of keys, which Redis Cluster could not route
// or the script would misread.
func (sc *script) checkKeys(n int) error {
	if n == sc.keys || sc.variadic && n >= sc.keys {
		return nil
	}
	return fmt.Errorf("script %s: %d keys, want %d", sc.name, n, sc.keys)
}

var (
	fragmentNeeds    = regexp.MustCompile(`^-- fragment (\w+); needs: (.*)\n`)
	definedName      = regexp.MustCompile(`(?m)^local (?:function )?(\w+)`)
	lineComment      = regexp.MustCompile(`--.*`)
	identifier       = regexp.MustCompile(`\w+`)
	headerFragments  = regexp.MustCompile(`^-- fragments: (.*)$`)
	headerKey        = regexp.MustCompile(`^-- KEYS\[([^\]]*)\]`)
	firstVariableKey = regexp.MustCompile(`^(\d+)\.\.`)
)

// shebangSupport is set once a server has refused a shebang line. It is per Publisher or
// Subscriber, so one process may talk to servers of both kinds.
type shebangSupport struct{ unsupported atomic.Bool }

// fragment is one file of lua/lib: the names it defines, the fragments it needs, and those it
// loads: uses only after calling load_fragments() (see lazyCode).
type fragment struct {
	body    string
	defines []string
	needs   []string
	loads   []string
}

// fragmentOrder is the order fragments are put together in: each after those it needs.
var fragmentOrder = []string{"int", "now_us", "next_ids", "born_after", "split", "position", "member", "each_chunk", "lease_marker", "far", "far_find", "list_row", "hmget", "exists_count", "stored", "head", "wake", "schedule", "held", "locate", "drop", "ended", "ack", "stale", "seal_batch", "close_batch", "drop_parked", "move_set", "publish_score", "publish_window", "publish_plain", "publish_debounce", "publish_replace", "publish_duplicate", "publish_keys", "publish_keyed", "publish_batch", "publish_flush", "publish_far", "publish_call", "publish_to"}

// scriptHeader is what the header of a script declares.
type scriptHeader struct {
	fragments []string // the fragments of lua/lib the script uses, not those they need
	keys      int      // how many KEYS it takes; the least, when variadic
	variadic  bool     // whether it takes more KEYS after those
}

// parseHeader reads the header of a script, its leading comment lines. The header names the
// fragments of lua/lib the script uses on one line,
//
//	-- fragments: now_us, split
//
// ("-- fragments: none" when none), and describes each of its keys on a line of its own,
// numbered from 1 in order:
//
//	-- KEYS[1] due  zset  ...
//	-- KEYS[2] ...
//
// A script that takes a variable number of keys after those describes them last, on lines that
// give ranges; the first range starts at the next index: "-- KEYS[3..2+G] ..." or "-- KEYS[3..]
// ...". Other KEYS lines are an error, a mistake in the header.
func parseHeader(file, src string) (scriptHeader, error) {
	var h scriptHeader
	listed := false
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if m := headerFragments.FindStringSubmatch(line); m != nil {
			if listed {
				return h, fmt.Errorf("script %s: two fragments lines in the header", file)
			}
			listed = true
			if m[1] != "none" {
				h.fragments = strings.Split(m[1], ", ")
			}
			continue
		}
		m := headerKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		switch {
		case err == nil && h.variadic:
			return h, fmt.Errorf("script %s: header line %q comes after the variable keys", file, line)
		case err == nil && n != h.keys+1:
			return h, fmt.Errorf("script %s: header line %q: want KEYS[%d]", file, line, h.keys+1)
		case err == nil:
			h.keys = n
		case h.variadic:
			// A further range of the variable keys.
		default:
			start := firstVariableKey.FindStringSubmatch(m[1])
			if start == nil || start[1] != strconv.Itoa(h.keys+1) {
				return h, fmt.Errorf("script %s: header line %q: want KEYS[%d] or the variable keys from KEYS[%d..]", file, line, h.keys+1, h.keys+1)
			}
			h.variadic = true
		}
	}
	if !listed {
		return h, fmt.Errorf("script %s: the header has no line \"-- fragments: ...\"", file)
	}
	return h, nil
}

// mustScript assembles a script from its file and the fragments its header lists, with the
// fragments they need. A mistake in a header is a bug in the adapter, so it panics when the
// package loads.
func mustScript(spec scriptSpec) *script {
	sc, err := assemble(spec)
	if err != nil {
		panic("redisdelay: " + err.Error())
	}
	return sc
}

func assemble(spec scriptSpec) (*script, error) {
	src, err := luaFiles.ReadFile(path.Join("lua", spec.file+".lua"))
	if err != nil {
		return nil, err
	}
	h, code, err := assembleCode(spec.file, string(src))
	if err != nil {
		return nil, err
	}
	shebang := "#!lua\n"
	if spec.allowOOM {
		shebang = "#!lua flags=allow-oom\n"
	}
	return &script{
		name:     spec.file,
		keys:     h.keys,
		variadic: h.variadic,
		flagged:  newScriptForm(shebang + code),
		plain:    newScriptForm(code),
	}, nil
}

// assembleCode reads the header of a script's source and puts the fragments it lists, with
// those they need, before the source, in fragmentOrder. It checks that the script uses a name of
// every fragment its header lists and of no other, and that the fragments use no name of a
// fragment left out: an undefined local would be a global lookup, which Redis refuses at run
// time.
func assembleCode(file, src string) (scriptHeader, string, error) {
	h, err := parseHeader(file, src)
	if err != nil {
		return h, "", err
	}
	frags, err := readFragments()
	if err != nil {
		return h, "", err
	}
	included, err := includedFragments(file, h.fragments, frags)
	if err != nil {
		return h, "", err
	}
	lib := libCode(included, frags)
	listed := map[string]bool{}
	for _, name := range h.fragments {
		listed[name] = true
	}
	inScript, inLib := namesUsed(src), namesUsed(lib)
	for _, name := range fragmentOrder {
		used := false
		_, in := included[name]
		for _, def := range frags[name].defines {
			switch {
			case inScript[def] && !listed[name]:
				return h, "", fmt.Errorf("script %s uses %s of fragment %q, which its header does not list", file, def, name)
			case inLib[def] && !in:
				return h, "", fmt.Errorf("script %s: a fragment uses %s of fragment %q, which it does not need", file, def, name)
			}
			used = used || inScript[def]
		}
		if listed[name] && !used {
			return h, "", fmt.Errorf("script %s lists fragment %q in its header, but uses none of its names", file, name)
		}
	}
	return h, lib + src, nil
}

// namesUsed returns the names in Lua code outside its comments.
func namesUsed(code string) map[string]bool {
	names := map[string]bool{}
	for _, name := range identifier.FindAllString(lineComment.ReplaceAllString(code, ""), -1) {
		names[name] = true
	}
	return names
}

// includedFragments returns the fragments a script's header lists and, transitively, those
// they need or load, each with its level: 0 for those the script defines on every call, and n
// for those only the nth nested loader of load_fragments defines (see lazyCode): a fragment's
// loads are a level deeper than it, its needs at its level, and a fragment takes the lowest
// level any path gives it.
func includedFragments(file string, listed []string, frags map[string]fragment) (map[string]int, error) {
	included := map[string]int{}
	var add func(name, by string, level int) error
	add = func(name, by string, level int) error {
		f, ok := frags[name]
		if !ok {
			return fmt.Errorf("script %s: unknown fragment %q (needed by %q)", file, name, by)
		}
		if was, seen := included[name]; seen && was <= level {
			return nil
		}
		included[name] = level
		for _, n := range f.needs {
			if err := add(n, name, level); err != nil {
				return err
			}
		}
		for _, n := range f.loads {
			if err := add(n, name, level+1); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range listed {
		if err := add(name, file, 0); err != nil {
			return nil, err
		}
	}
	return included, nil
}

// readFragments reads every fragment of lua/lib.
func readFragments() (map[string]fragment, error) {
	frags := map[string]fragment{}
	for _, name := range fragmentOrder {
		f, err := readFragment(name)
		if err != nil {
			return nil, err
		}
		frags[name] = f
	}
	return frags, nil
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
	needs, loads, _ := strings.Cut(m[2], "; loads: ")
	if needs != "nothing" {
		f.needs = strings.Split(needs, ", ")
	}
	if loads != "" {
		f.loads = strings.Split(loads, ", ")
	}
	for _, d := range definedName.FindAllStringSubmatch(string(data), -1) {
		f.defines = append(f.defines, d[1])
	}
	return f, nil
}
