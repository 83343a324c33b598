package redisdelay

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNameLength is the longest topic or consumer group name, in bytes, that ValidateName accepts.
const MaxNameLength = 512

// ValidateName reports whether name can be used as a topic or a consumer group name. A name must
// be non-empty, at most MaxNameLength bytes, free of '{' and '}' (braces would change the Redis
// Cluster hash tag that keeps all keys of a topic in one slot), and must not end in '#' and
// digits, which name the partitions of a topic. Any other byte, ':' included, is allowed. The
// error wraps ErrInvalidName and names what is wrong.
func ValidateName(kind, name string) error {
	switch {
	case partitionSuffix(name) > 0 || partitionSuffix(strings.SplitN(name, DeadLetterInfix, 2)[0]) > 0:
		return fmt.Errorf("redisdelay: %w: %s name %q ends in '#' and digits, which name topic partitions", ErrInvalidName, kind, name)
	case name == "":
		return fmt.Errorf("redisdelay: %w: %s name is empty", ErrInvalidName, kind)
	case len(name) > MaxNameLength:
		return fmt.Errorf("redisdelay: %w: %s name %.40q... is %d bytes, more than %d", ErrInvalidName, kind, name, len(name), MaxNameLength)
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("redisdelay: %w: %s name %q contains '{' or '}', which would break the Redis Cluster hash tag", ErrInvalidName, kind, name)
	}
	return nil
}

// keySpace builds every Redis key and Pub/Sub channel name the adapter uses. No other code
// concatenates key names.
//
// Layout, with P the key prefix, T the topic and G a consumer group:
//
//	P{T}:seq           string  counter that gives each published message its internal ID
//	P{T}:msg           hash    ID -> marshaled message, stored once per topic; a message of a
//	                           single-group topic is here only once claimed
//	P{T}:refs          hash    ID -> groups that still hold the message (only while > 1)
//	P{T}:groups        set     consumer groups registered on the topic
//	P{T}:g:G:due       zset    ID, ID|message (single group), or ID:N after N attempts,
//	                           scored by due time (Unix µs)
//	P{T}:g:G:lease     zset    ID:N, leased for attempt N, scored by lease deadline (Unix µs)
//	P{T}:g:G:wake      channel Pub/Sub channel that carries the new earliest due time
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
	seq, messages, refs, groups string
}

// groupKeys are the keys of one consumer group on one topic.
type groupKeys struct {
	due, lease  string
	wakeChannel string
}

// partitionName names partition n of a topic for the key space: the topic itself for partition
// 0, so that a topic keeps its keys when it is split, else the topic, '#' and n.
func partitionName(topic string, n int) string {
	if n == 0 {
		return topic
	}
	return topic + "#" + strconv.Itoa(n)
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

// sameSlot reports whether two topics' keys share one hash tag, hence one Redis Cluster slot.
func (k keySpace) sameSlot(a, b string) bool {
	return hashTag(k.tag(a)) == hashTag(k.tag(b))
}

func hashTag(key string) string {
	start := strings.IndexByte(key, '{')
	end := strings.IndexByte(key[start+1:], '}')
	return key[start+1 : start+1+end]
}

func (k keySpace) topic(topic string) topicKeys {
	t := k.tag(topic)
	return topicKeys{
		seq:      t + ":seq",
		messages: t + ":msg",
		refs:     t + ":refs",
		groups:   t + ":groups",
	}
}

func (k keySpace) group(topic, group string) groupKeys {
	g := k.tag(topic) + ":g:" + group
	return groupKeys{
		due:         g + ":due",
		lease:       g + ":lease",
		wakeChannel: g + ":wake",
	}
}
