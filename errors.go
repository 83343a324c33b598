package redisdelay

// This file owns the errors callers branch on: the sentinel errors and MessageError.

import (
	"errors"
	"fmt"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

var (
	// ErrPublisherClosed is returned by Publish after Close.
	ErrPublisherClosed = errors.New("redisdelay: publisher is closed")
	// ErrSubscriberClosed is returned by Subscribe and SubscribeInitialize after Close.
	ErrSubscriberClosed = errors.New("redisdelay: subscriber is closed")
	// ErrInvalidMessage is wrapped by every MessageError, so callers can test for any rejected
	// message with errors.Is(err, ErrInvalidMessage).
	ErrInvalidMessage = errors.New("invalid message")
	// ErrInvalidName is returned for a topic or consumer group name that cannot be stored; see
	// ValidateName.
	ErrInvalidName = errors.New("invalid name")
	// ErrNotFound is wrapped by the Inspector's errors for a topic, consumer group or message
	// that does not exist; the error names it.
	ErrNotFound = store.ErrNotFound
	// ErrUnsupportedTarget is wrapped by the error of an Inspector operation given a Target it
	// does not take (see Target); the error names the operation and the target.
	ErrUnsupportedTarget = errors.New("target not supported by the operation")
	// ErrGroupRemoved stops a subscription whose consumer group was removed
	// (Inspector.RemoveGroup) while it ran, even when the group was registered again since: what
	// it held was dropped with the group. It is logged, and the subscription's channel closes.
	ErrGroupRemoved = store.ErrGroupRemoved
	// ErrInvalidKey is wrapped by the error for a message key that cannot be used; see
	// ValidateKey. Publish returns it inside a *MessageError.
	ErrInvalidKey = errors.New("invalid message key")
	// ErrBeyondMaxDelay is wrapped by the error for a delay, debounce cap, deadline, reschedule
	// or backfill range that reaches more than MaxDelay ahead; the error names the value.
	ErrBeyondMaxDelay = errors.New("beyond MaxDelay")
	// ErrCorruptMessage is returned by the default Unmarshaler for data it cannot decode.
	ErrCorruptMessage = errors.New("corrupt stored message")
	// ErrNotDurable is returned by Publish with DurableReplicas set when fewer replicas than
	// that confirmed the messages within DurableTimeout, or when the wait for them failed (the
	// connection was lost, or the call timed out, after the messages were stored; the error
	// wraps the cause). The messages are stored on the master and will be delivered unless a
	// failover loses them; publishing them again is safe but may deliver them twice.
	ErrNotDurable = store.ErrNotDurable
	// ErrOutcomeUnknown is wrapped by a Publish error when the publish script may or may not
	// have run: the call timed out after the script was sent, the connection was lost before
	// its reply arrived, or the reply was one go-redis tries the command again on (LOADING,
	// READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, max clients), which may follow a first try
	// that ran. The messages are then either all stored or none is. Publishing them
	// again is safe but may deliver them twice. Within one Publish call the adapter never stores
	// a message twice: a script that the Redis client runs again (go-redis retries a command
	// whose connection failed) recognises the call's token and stores nothing more.
	ErrOutcomeUnknown = store.ErrOutcomeUnknown
	// ErrRedisFull is wrapped, together with Redis's own OOM reply, by a Publish error when
	// Redis refused the publish because used memory reached maxmemory (policy noeviction).
	// Nothing of the batch is stored. Consumers keep draining a full Redis: claims, acks, nacks,
	// lease extensions, releases and dead-lettering still run.
	ErrRedisFull = store.ErrRedisFull
	// ErrEvictingRedis is returned by Publish, Subscribe and SubscribeInitialize when the
	// server's maxmemory-policy (CONFIG GET maxmemory-policy) is anything but noeviction: an
	// evicting Redis deletes scheduled messages, leases and consumer group registrations
	// silently. Set the policy to noeviction, or set AllowEvictingRedis to accept the risk.
	ErrEvictingRedis = errors.New("redis evicts keys (maxmemory-policy is not noeviction)")
)

// MessageError reports a message that Publish rejected before anything of its batch was stored.
// It names the topic, the message UUID and the offending metadata key (empty when the problem is
// not a metadata entry, such as an oversized payload), and the offending value.
type MessageError struct {
	Topic string
	UUID  string
	Key   string
	Value string
	Err   error
}

// Error names the topic, the UUID, and the key and value when there is one; each is quoted in
// full up to 64 bytes, and longer ones by their first 64 bytes and their length.
func (e *MessageError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("redisdelay: topic %s: message %s: %v", quote(e.Topic), quote(e.UUID), e.Err)
	}
	return fmt.Sprintf("redisdelay: topic %s: message %s: metadata %s=%s: %v", quote(e.Topic), quote(e.UUID), quote(e.Key), quote(e.Value), e.Err)
}

// quote quotes s for an error message, at most its first 64 bytes (see store.Quote).
func quote(s string) string { return store.Quote(s) }

// Unwrap returns both ErrInvalidMessage and the underlying cause.
func (e *MessageError) Unwrap() []error { return []error{ErrInvalidMessage, e.Err} }
