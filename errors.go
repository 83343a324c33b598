package redisdelay

import (
	"errors"
	"fmt"
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
	// ErrCorruptMessage is returned by the default Unmarshaler for data it cannot decode.
	ErrCorruptMessage = errors.New("corrupt stored message")
	// ErrNotDurable is returned by Publish with DurableReplicas set when fewer replicas than
	// that confirmed the messages within DurableTimeout. The messages are stored on the master
	// and will be delivered unless a failover loses them; publishing them again is safe but may
	// deliver them twice.
	ErrNotDurable = errors.New("not confirmed by enough replicas")
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

func (e *MessageError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("redisdelay: topic %q: message %q: %v", e.Topic, e.UUID, e.Err)
	}
	return fmt.Sprintf("redisdelay: topic %q: message %q: metadata %q=%q: %v", e.Topic, e.UUID, e.Key, e.Value, e.Err)
}

// Unwrap returns both ErrInvalidMessage and the underlying cause.
func (e *MessageError) Unwrap() []error { return []error{ErrInvalidMessage, e.Err} }
