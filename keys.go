package redisdelay

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// MaxNameLength is the longest topic or consumer group name, in bytes, that ValidateName
// accepts; in a name that contains DeadLetterInfix, the limit holds for each part around it.
// So every topic that Publish accepts can be subscribed by every consumer group that Subscribe
// accepts: the default dead-letter topic, topic + DeadLetterInfix + group, is valid too.
const MaxNameLength = 512

// ValidateName reports whether name can be used as a topic or a consumer group name. A name must
// be non-empty, at most MaxNameLength bytes (each part around DeadLetterInfix, see
// MaxNameLength), valid UTF-8 without control characters (so that it reads the same in logs,
// metric labels, the CLI and the dashboard), free of '{' and '}' (braces would change the Redis
// Cluster hash tag that keeps all keys of a topic in one slot), not "." or ".." (which no URL
// path can name), and must not end in '#' and digits, which name the partitions of a topic. Any
// other character, ':' and '/' included, is allowed. The error wraps ErrInvalidName and names
// what is wrong, quoting at most 64 bytes of the name.
func ValidateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("redisdelay: %w: %s name is empty", ErrInvalidName, kind)
	case !utf8.ValidString(name):
		return fmt.Errorf("redisdelay: %w: %s name %s is not valid UTF-8", ErrInvalidName, kind, quote(name))
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("redisdelay: %w: %s name %s holds a control character", ErrInvalidName, kind, quote(name))
	case name == "." || name == "..":
		return fmt.Errorf("redisdelay: %w: %s name %s is a path step that no URL can name", ErrInvalidName, kind, quote(name))
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("redisdelay: %w: %s name %s contains '{' or '}', which would break the Redis Cluster hash tag", ErrInvalidName, kind, quote(name))
	case partitionSuffix(name) > 0 || partitionSuffix(firstPart(name)) > 0:
		return fmt.Errorf("redisdelay: %w: %s name %s ends in '#' and digits, which name topic partitions", ErrInvalidName, kind, quote(name))
	}
	for rest := name; ; {
		part, after, found := strings.Cut(rest, DeadLetterInfix)
		if len(part) > MaxNameLength {
			return fmt.Errorf("redisdelay: %w: %s name %s has a part of %d bytes, more than %d", ErrInvalidName, kind, quote(name), len(part), MaxNameLength)
		}
		if !found {
			return nil
		}
		rest = after
	}
}

// firstPart returns name up to its first DeadLetterInfix, or all of it.
func firstPart(name string) string {
	part, _, _ := strings.Cut(name, DeadLetterInfix)
	return part
}

// keySpace builds every Redis key and Pub/Sub channel name the adapter uses. No other code
// concatenates key names.
//
// Layout, with P the key prefix, T the topic and G a consumer group:
//
//	P{T}:seq           string  counter that gives each published message its internal ID
//	P{T}:msg           hash    ID -> marshaled message, stored once per topic; a message of a
//	                           single-group topic is here only once claimed. A keyed message is
//	                           under "=" and its key, its ID's hex digits before the message.
//	                           Each item of an open batch waits under the batch's field, "\x01"
//	                           and its number, until the batch closes (see seal_batch.lua)
//	P{T}:refs          hash    ID or "=" key -> groups that still hold the message (while > 1)
//	P{T}:batches       hash    batch key -> "hex count bytes due" of its open batch
//	P{T}:history:K     hash    finished keyed message with key K, while its retention lasts:
//	                           "" -> retention (ms), group -> "outcome time attempt[ reason]"
//	P{T}:groups        set     consumer groups registered on the topic
//	P{T}:parked        zset    messages published while no group was registered, in the
//	                           single-group form; the first group to register takes it over.
//	                           While the window is open, also every message published: each
//	                           group registering then gets a copy (see register.lua)
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
//	                           of a removed group stops (see register.lua, claim.lua)
//	P{T}:g:G:due:removed    zset  a removed group's due and lease sets, renamed there by the
//	P{T}:g:G:lease:removed  zset  removal's first step and emptied in chunks (removegroup.lua);
//	                              no other key of any group ends in ":removed"
//
//	Ptopics            hash    topic -> partitions, every topic published to or subscribed
//
// Times are on the Redis clock. ID:N in the lease set is the lease's fencing token.
//
// The braces make {T} the hash tag, so every key of a topic maps to one Redis Cluster slot. The
// keys of a dead-letter topic T.dead-letter.G are P{T}.dead-letter.G:..., in T's slot.
type keySpace struct {
	prefix string
}

// topicKeys are the keys shared by all consumer groups of a topic.
type topicKeys struct {
	seq, messages, refs, groups, parked string
	// window exists while the new-group window is open (see register.lua).
	window string
	// history is the prefix of the history keys: history + key is the key's history.
	history string
	// batches holds the open batch of each batch key (see batch.lua).
	batches string
	// removedParked is the parked set once the removal of the topic's last group took it
	// (see removegroup.lua).
	removedParked string
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
}

// partName names partition p for the key space: the topic itself for partition 0, so that a
// topic keeps its keys when it is split, else the topic, '#' and the partition's number.
func partName(p store.Partition) string {
	if p.N == 0 {
		return p.Topic
	}
	return p.Topic + "#" + strconv.Itoa(p.N)
}

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

// tag is the key prefix of a topic partition (see partitionName), with its hash tag in braces:
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
func (k keySpace) sameSlot(a, b store.Partition) bool {
	return hashTag(k.tag(partName(a))) == hashTag(k.tag(partName(b)))
}

func hashTag(key string) string {
	start := strings.IndexByte(key, '{')
	end := strings.IndexByte(key[start+1:], '}')
	return key[start+1 : start+1+end]
}

func (k keySpace) topic(p store.Partition) topicKeys {
	t := k.tag(partName(p))
	return topicKeys{
		seq:           t + ":seq",
		messages:      t + ":msg",
		refs:          t + ":refs",
		groups:        t + ":groups",
		parked:        t + ":parked",
		removedParked: t + ":parked:removed",
		window:        t + ":window",
		history:       t + ":history:",
		batches:       t + ":batches",
	}
}

// topicRegistry is the hash of every topic published to or subscribed, topic -> partitions. It
// has no hash tag: it is one key in one slot, written with HSET outside the topic scripts.
func (k keySpace) topicRegistry() string { return k.prefix + "topics" }

// call is the key that records that publish call token ran on partition p.
func (k keySpace) call(p store.Partition, token string) string {
	return k.tag(partName(p)) + ":call:" + token
}

// claimRecord is the key that holds the last claim of subscription id in group g.
func (k keySpace) claimRecord(g store.Group, id string) string {
	return k.tag(partName(g.Partition)) + ":g:" + g.Name + ":claim:" + id
}

func (k keySpace) group(g store.Group) groupKeys {
	prefix := k.tag(partName(g.Partition)) + ":g:" + g.Name
	return groupKeys{
		due:          prefix + ":due",
		lease:        prefix + ":lease",
		keyed:        prefix + ":keyed",
		paused:       prefix + ":paused",
		wakeChannel:  prefix + ":wake",
		epoch:        prefix + ":epoch",
		removedDue:   prefix + ":due:removed",
		removedLease: prefix + ":lease:removed",
	}
}
