package redisdelay

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest topic or consumer group name, in bytes, that ValidateName accepts.
const MaxNameLength = 512

// ValidateName reports whether name can be used as a topic or a consumer group name. A name must
// be non-empty, at most MaxNameLength bytes, and free of '{' and '}': braces would change the
// Redis Cluster hash tag that keeps all keys of a topic in one slot. Any other byte, ':' included,
// is allowed. The error wraps ErrInvalidName and names what is wrong.
func ValidateName(kind, name string) error {
	switch {
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
//	P{T}:msg           hash    ID -> marshaled message, stored once per topic
//	P{T}:refs          hash    ID -> groups that still hold the message (only while > 1)
//	P{T}:groups        set     consumer groups registered on the topic
//	P{T}:g:G:due       zset    ID scored by due time (Unix µs, Redis clock)
//	P{T}:g:G:lease     zset    ID scored by lease deadline (Unix µs, Redis clock)
//	P{T}:g:G:attempts  hash    ID -> delivery attempts so far; the current attempt fences acks
//	P{T}:g:G:wake      channel Pub/Sub channel that carries the new earliest due time
//
// The braces make {T} the hash tag, so every key of a topic maps to one Redis Cluster slot.
type keySpace struct {
	prefix string
}

// topicKeys are the keys shared by all consumer groups of a topic.
type topicKeys struct {
	seq, messages, refs, groups string
}

// groupKeys are the keys of one consumer group on one topic.
type groupKeys struct {
	due, lease, attempts string
	wakeChannel          string
}

func (k keySpace) tag(topic string) string {
	return k.prefix + "{" + topic + "}"
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
		attempts:    g + ":attempts",
		wakeChannel: g + ":wake",
	}
}
