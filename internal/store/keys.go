package store

import (
	"strconv"
	"strings"
	"sync"
)

// keys.go owns the key layout: what the store's callers name (a topic partition, a consumer
// group on it, a set of messages) and every Redis key and channel built from those names.

// Partition is one partition of a topic: N from 0 to the topic's partition count - 1.
type Partition struct {
	Topic string
	N     int
}

// Group is a consumer group on one topic partition.
type Group struct {
	Partition
	Name string
}

// Of returns group Name on partition p.
func (p Partition) Of(name string) Group { return Group{Partition: p, Name: name} }

// name names the partition in the key space: the topic itself for partition 0, so that a topic
// keeps its keys when it is split, else the topic, '#' and N.
func (p Partition) name() string {
	if p.N == 0 {
		return p.Topic
	}
	return p.Topic + "#" + strconv.Itoa(p.N)
}

// HasPartitionSuffix reports whether name ends in '#' and digits, as the key-space names of
// partitions do, so that no topic can take a partition's name.
func HasPartitionSuffix(name string) bool { return partitionSuffix(name) > 0 }

// partitionSuffix returns the length of a trailing '#' and digits in name, 0 if there is none.
func partitionSuffix(name string) int {
	i := strings.LastIndexByte(name, '#')
	if i < 0 || i == len(name)-1 {
		return 0
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return 0
		}
	}
	return len(name) - i
}

// SetKind is which sorted set of messages a Set names.
type SetKind int

const (
	// DueSet is a consumer group's due set: its messages scheduled, due or not.
	DueSet SetKind = iota + 1
	// LeaseSet is a consumer group's lease set: its messages in flight.
	LeaseSet
	// ParkedSet is a topic partition's parked set: the messages that wait for a first consumer
	// group, such as the dead letters on a dead-letter topic.
	ParkedSet
)

// Set names one sorted set of messages, for the Inspector's reads.
type Set struct {
	Kind SetKind
	// Group is the consumer group of a due or lease set; of a parked set, only its Partition
	// counts.
	Group Group
}

// Due returns the due set of group g.
func Due(g Group) Set { return Set{Kind: DueSet, Group: g} }

// Leases returns the lease set of group g.
func Leases(g Group) Set { return Set{Kind: LeaseSet, Group: g} }

// Parked returns the parked set of partition p.
func Parked(p Partition) Set { return Set{Kind: ParkedSet, Group: Group{Partition: p}} }

// Span selects the members of a set by due time, as list.lua and purge.lua read it.
type Span string

const (
	// All is every member.
	All Span = "all"
	// DueNow are the members due now: scored up to the Redis clock.
	DueNow Span = "due"
	// Later are the members due later.
	Later Span = "scheduled"
)

// DeadLetterInfix joins a topic and a consumer group in the name of their dead-letter topic,
// as the root package's DeadLetterInfix does: a topic whose name holds it shares the hash slot
// of the part before it (see keySpace.tag).
const DeadLetterInfix = ".dead-letter."

// keySpace builds every Redis key and Pub/Sub channel name the adapter uses. No other code
// concatenates key names.
//
// Layout, with P the key prefix, T the topic and G a consumer group:
//
//	P{T}:seq           string  counter that gives each published message its internal ID and each
//	                           registration its epoch; created from the Redis clock (see
//	                           next_ids.lua), so that none repeats after Redis lost its data
//	P{T}:seq:birth     string  seq's first number: a claim whose epoch is older than it finds
//	                           its registration lost with the data, not removed (see claim.lua).
//	                           Built from seq's name in Lua, as old as seq, never deleted
//	P{T}:msg           hash    ID -> marshaled message, stored once per topic; a message of a
//	                           single-group topic is here only once claimed. A keyed message is
//	                           under "=" and its key, its ID's hex digits before the message.
//	                           Each item of an open batch waits under the batch's field, "\x01"
//	                           and its number, until the batch closes (see seal_batch.lua)
//	P{T}:refs          hash    ID or "=" key -> groups that still hold the message (while > 1)
//	P{T}:batches       hash    batch key -> "hex count bytes due" of its open batch
//	P{T}:history:K     hash    finished keyed message with key K, while its retention lasts:
//	                           "" -> retention (ms), group -> "outcome time attempt[ reason]"
//	P{T}:debounce:K    string  "ID cap": the latest due time (Unix µs) of the keep-later message
//	                           with key K and that ID, published with a max wait; expires by
//	                           itself a max wait after the cap (see publish_debounce.lua)
//	P{T}:groups        set     consumer groups registered on the topic
//	P{T}:parked        zset    messages published while no group was registered, in the
//	                           single-group form; the first group to register takes it over.
//	                           While the window is open, also every message published: each
//	                           group registering then gets a copy (see register.lua); a keyed
//	                           message's ID:0 there names the window's copy, stored under the
//	                           plain ID, which holds no key (see publish_window.lua)
//	P{T}:parked:removed zset   the parked set, taken by the removal of the topic's last group
//	                           and emptied by its later steps (see removegroup.lua)
//	P{T}:window        hash    exists while the topic's new-group window is open: "" -> its cap
//	                           (NewGroupWindowMaxMessages), group -> 1 for each group registered
//	                           within it; expires after NewGroupWindow
//	P{T}:call:K        string  publish call K ran, with its first ID (expires; see publish.lua)
//	P{T}:g:G:due       zset    ID, ID|message (single group), or ID:N after N attempts,
//	                           scored by due time (Unix µs); see scripts.go
//	P{T}:g:G:keyed     hash    key -> ID:N, for the keyed messages the group has claimed
//	P{T}:g:G:paused    string  exists while the group is paused: claims hand out nothing
//	P{T}:g:G:lease     zset    ID:N, leased for attempt N, scored by lease deadline (Unix µs)
//	P{T}:g:G:wake      channel Pub/Sub channel that carries the new earliest due time
//	P{T}:g:G:claim:S   string  subscription S's last claim, to answer it again when its reply
//	                           was lost (expires after the lease timeout; see claim.lua)
//	P{T}:g:G:epoch     string  the group's registration: an ID from seq, new each time the group
//	                           is registered after a removal; claims name it, so a subscription
//	                           of a removed group stops (see register.lua, claim.lua), and the
//	                           lease set's marker carries it, so that an ack, nack, extension or
//	                           release of another registration is refused (see lease_marker.lua)
//	P{T}:g:G:due:removed    zset  a removed group's due and lease sets, renamed there by the
//	P{T}:g:G:lease:removed  zset  removal's first step and emptied in chunks (removegroup.lua);
//	                              no other key of any group ends in ":removed"
//	P{T}:g:G:far       zset    the group's compact tier: one member "E:S" per time bucket, E the
//	                           group's epoch and S the bucket's start (Unix µs), scored by the
//	                           time the bucket is moved to the due set (see lua/lib/promote.lua)
//	P{T}:g:G:far:E:S   list    the bucket's messages, each its due time's offset from S (5 bytes)
//	                           and its due-set member; the name is the index key, ":" and the
//	                           member, so that the scripts build it from the index key
//	P{T}:g:G:far:n     string  how many messages the compact tier holds
//	P{T}:g:G:far:removed zset  a removed group's bucket index, emptied in chunks by its removal
//
//	Ptopics            hash    topic -> partitions, every topic published to or subscribed
//
// The periodic schedules live in the hash slot of their tick topic S (see periodic.go):
//
//	P{S}:schedule:N    hash    schedule N's state: def (its definition, JSON), ver (a token,
//	                           new with each definition), next (the pending tick, Unix ms),
//	                           paused, buffered (a tick waiting for its predecessor, Unix ms),
//	                           last and last_key (the last published tick and its message key),
//	                           outcome and outcome_at (the last tick's outcome and when, µs),
//	                           published and skipped (counts), created and updated (µs)
//	P{S}:schedules     zset    every schedule's name, scored 0, read in name order (BYLEX)
//
// The records of running workers (Subscribers and Schedulers) share one hash tag of their own,
// {workers} (see workers.go); a topic named "workers" shares their slot, never a key:
//
//	P{workers}         zset    worker member ("kind ID") -> when its record expires (Unix ms)
//	P{workers}:index   zset    worker member, scored 0, read in member order (BYLEX)
//	P{workers}:info    hash    worker member -> "expiry lastbeat record" (Unix ms, then JSON)
//
// All three expire with the latest record (see worker_beat.lua).
//
// Times are on the Redis clock. ID:N in the lease set is the lease's fencing token.
//
// The braces make {T} the hash tag, so every key of a topic maps to one Redis Cluster slot. The
// keys of a dead-letter topic T.dead-letter.G are P{T}.dead-letter.G:..., in T's slot.
type keySpace struct {
	prefix string
	// cache keeps the key names of topics and groups, built once: a publish round names about
	// twenty keys, each a string to build. nil builds them each time.
	cache *keyCache
}

// maxCachedKeys bounds the topic partitions and the groups a keyCache keeps; past it, it
// starts again empty.
const maxCachedKeys = 10000

// keyCache holds the key names built for topic partitions and groups.
type keyCache struct {
	mu     sync.Mutex
	topics map[Partition]topicKeys
	groups map[Group]groupKeys
}

func newKeyCache() *keyCache {
	return &keyCache{topics: map[Partition]topicKeys{}, groups: map[Group]groupKeys{}}
}

// cached returns m[key], built by build and kept in m when missing; c.mu guards m.
func cached[K comparable, V any](c *keyCache, m *map[K]V, key K, build func(K) V) V {
	c.mu.Lock()
	v, ok := (*m)[key]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = build(key)
	c.mu.Lock()
	if len(*m) >= maxCachedKeys {
		*m = map[K]V{}
	}
	(*m)[key] = v
	c.mu.Unlock()
	return v
}

// topicKeys are the keys shared by all consumer groups of a topic.
type topicKeys struct {
	// tag is the prefix of every key of the partition (see keySpace.tag).
	tag                                 string
	seq, messages, refs, groups, parked string
	// window exists while the new-group window is open (see register.lua).
	window string
	// history is the prefix of the history keys: history + key is the key's history.
	history string
	// debounce is the prefix of the debounce caps: debounce + key is the key's cap (see
	// publish_debounce.lua).
	debounce string
	// batches holds the open batch of each batch key (see batch.lua).
	batches string
	// removedParked is the parked set once the removal of the topic's last group took it
	// (see removegroup.lua).
	removedParked string
	// published holds the keys that publish_to reads after the call's key, in its order (seq,
	// messages, refs, groups, parked, history, batches, window, debounce), as interface values
	// boxed once here rather than in every publish call.
	published []any
}

// groupKeys are the keys of one consumer group on one topic.
type groupKeys struct {
	due, lease, keyed, paused string
	wakeChannel               string
	// epoch holds the group's registration (see register.lua).
	epoch string
	// removedDue and removedLease hold the messages of a removed group until its removal has
	// dropped them (see removegroup.lua).
	removedDue, removedLease string
	// far is the index of the group's compact tier, and the prefix of its buckets and count
	// (see promote.lua); removedFar is the index a removal took over.
	far, removedFar string
	// claimRecords is the prefix of the keys that hold each subscription's last claim (see
	// keySpace.claimRecord).
	claimRecords string
	// boxed holds what publish_to, claim.lua and ack.lua take of the group, boxed once (see
	// topicKeys.published).
	boxed groupBoxed
}

// groupBoxed holds a group's keys and name that every publish, claim and ack call sends, as
// interface values: claim.lua's keys are claimBefore, the subscription's claim record, then
// claimAfter; ack.lua's are ack.
type groupBoxed struct {
	due, keyed, far, epoch, wakeChannel, name any
	claimBefore                               [4]any
	claimAfter                                [7]any
	ack                                       [5]any
}

// tag is the key prefix of a topic partition (see Partition.name), with its hash tag in braces:
// {topic} or {topic#n}. A dead-letter topic, whose name is its source topic, DeadLetterInfix and
// more, shares the hash tag of the same partition of its source topic, so that a message can
// move to it in one Lua call on Redis Cluster. The whole name is in the prefix either way, so no
// two topics or partitions share keys.
func (k keySpace) tag(name string) string {
	suffix := name[len(name)-partitionSuffix(name):]
	name = name[:len(name)-len(suffix)]
	if i := strings.Index(name, DeadLetterInfix); i > 0 {
		return k.prefix + "{" + name[:i] + suffix + "}" + name[i:]
	}
	return k.prefix + "{" + name + suffix + "}"
}

// sameSlot reports whether the keys of two partitions share one hash tag, hence one Redis
// Cluster slot.
func (k keySpace) sameSlot(a, b Partition) bool {
	return hashTag(k.tag(a.name())) == hashTag(k.tag(b.name()))
}

func hashTag(key string) string {
	start := strings.IndexByte(key, '{')
	end := strings.IndexByte(key[start+1:], '}')
	return key[start+1 : start+1+end]
}

func (k keySpace) topic(p Partition) topicKeys {
	if k.cache == nil {
		return k.buildTopic(p)
	}
	return cached(k.cache, &k.cache.topics, p, k.buildTopic)
}

func (k keySpace) buildTopic(p Partition) topicKeys {
	t := k.tag(p.name())
	tk := topicKeys{
		tag:           t,
		seq:           t + ":seq",
		messages:      t + ":msg",
		refs:          t + ":refs",
		groups:        t + ":groups",
		parked:        t + ":parked",
		removedParked: t + ":parked:removed",
		window:        t + ":window",
		history:       t + ":history:",
		debounce:      t + ":debounce:",
		batches:       t + ":batches",
	}
	tk.published = []any{tk.seq, tk.messages, tk.refs, tk.groups, tk.parked, tk.history, tk.batches, tk.window, tk.debounce}
	return tk
}

// topicRegistry is the hash of every topic published to or subscribed, topic -> partitions. It
// has no hash tag: it is one key in one slot, written with HSET outside the topic scripts.
func (k keySpace) topicRegistry() string { return k.prefix + "topics" }

// call is the key that records that publish call token ran on partition p.
func (k keySpace) call(p Partition, token string) string {
	return k.topic(p).tag + ":call:" + token
}

// claimRecord is the key that holds the last claim of subscription id in group g.
func (k keySpace) claimRecord(g Group, id string) string {
	return k.group(g).claimRecords + id
}

func (k keySpace) group(g Group) groupKeys {
	if k.cache == nil {
		return k.buildGroup(g)
	}
	return cached(k.cache, &k.cache.groups, g, k.buildGroup)
}

func (k keySpace) buildGroup(g Group) groupKeys {
	prefix := k.tag(g.name()) + ":g:" + g.Name
	gk := groupKeys{
		due:          prefix + ":due",
		lease:        prefix + ":lease",
		keyed:        prefix + ":keyed",
		paused:       prefix + ":paused",
		wakeChannel:  prefix + ":wake",
		epoch:        prefix + ":epoch",
		removedDue:   prefix + ":due:removed",
		removedLease: prefix + ":lease:removed",
		far:          prefix + ":far",
		removedFar:   prefix + ":far:removed",
	}
	tk := k.topic(g.Partition)
	gk.claimRecords = prefix + ":claim:"
	gk.boxed = groupBoxed{
		due: gk.due, keyed: gk.keyed, far: gk.far, epoch: gk.epoch, wakeChannel: gk.wakeChannel, name: g.Name,
		claimBefore: [...]any{gk.due, gk.lease, tk.messages, tk.refs},
		claimAfter:  [...]any{gk.keyed, tk.history, gk.paused, tk.batches, gk.epoch, gk.far, tk.seq},
		ack:         [...]any{gk.lease, tk.messages, tk.refs, gk.keyed, tk.history},
	}
	return gk
}

// schedule is the state hash of periodic schedule name, in the slot of tick topic partition
// tick; with name "", the prefix of every schedule's state hash.
func (k keySpace) schedule(tick Partition, name string) string {
	return k.tag(tick.name()) + ":schedule:" + name
}

// scheduleIndex is the sorted set of every periodic schedule's name, in the slot of tick.
func (k keySpace) scheduleIndex(tick Partition) string { return k.tag(tick.name()) + ":schedules" }

// set returns the key of set.
func (k keySpace) set(set Set) string {
	switch set.Kind {
	case DueSet:
		return k.group(set.Group).due
	case LeaseSet:
		return k.group(set.Group).lease
	}
	return k.topic(set.Group.Partition).parked
}

// workers are the keys of the workers' records: expiry, index and info (see worker_beat.lua).
func (k keySpace) workers() []string {
	tag := k.prefix + "{workers}"
	return []string{tag, tag + ":index", tag + ":info"}
}
