package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher publishes Watermill messages to the Redis delay queue. It is safe for concurrent use.
type Publisher struct {
	config  PublisherConfig
	logger  watermill.LoggerAdapter
	store   store
	delayed message.Publisher // applies delay.WithContext, then calls publish

	closeMu sync.RWMutex // Publish holds it for reading, so Close waits for publishes under way
	closed  bool

	groupsMu sync.Mutex
	groups   map[string][]string // topic -> consumer groups last seen registered
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. A nil logger means watermill.NopLogger. It makes no Redis
// call; an invalid config is returned as an error naming the field.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	p := &Publisher{
		config: config,
		logger: logger.With(watermill.LogFields{"provider": "redisdelay"}),
		store:  store{client: config.Client, keys: keySpace{prefix: config.KeyPrefix}},
		groups: map[string][]string{},
	}
	// delay.NewPublisher turns a delay set with delay.WithContext on a message's context into
	// delay metadata, as Watermill's own delayed publishers do; AllowNoDelay keeps messages
	// without a delay due at once.
	p.delayed, _ = delay.NewPublisher(publishFunc(p.publish), delay.PublisherConfig{AllowNoDelay: true})
	return p, nil
}

// Publish stores msgs on topic and schedules each, at its due time, for every consumer group
// registered on the topic (the default group if none is). One Publish is one atomic Lua script
// call: all of msgs are stored or none are.
//
// The due time of each message is the Redis server clock at the time of the call plus DelayOf
// the message; a delay set with delay.WithContext on the message's context counts too (it is
// written to the message's metadata first, as delay.NewPublisher does). The AttemptMetadataKey
// of a message received from a Subscriber is not stored.
//
// Errors: ErrPublisherClosed after Close; an error wrapping ErrInvalidName for a bad topic; a
// *MessageError (wrapping ErrInvalidMessage) naming the topic, UUID and metadata key of a
// message that cannot be stored; otherwise the Redis error, wrapped with the topic. The call is
// bounded by OperationTimeout and by the context of the first message.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	return p.delayed.Publish(topic, msgs...)
}

func (p *Publisher) publish(topic string, msgs ...*message.Message) error {
	if err := ValidateName("topic", topic); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now()
	batch := make([]stored, len(msgs))
	for i, msg := range msgs {
		d, at, err := scheduleOf(msg, now)
		if err != nil {
			var me *metadataError
			if errors.As(err, &me) {
				return &MessageError{Topic: topic, UUID: msg.UUID, Key: me.key, Value: me.value, Err: me.err}
			}
			return &MessageError{Topic: topic, UUID: msg.UUID, Err: err}
		}
		if _, ok := msg.Metadata[AttemptMetadataKey]; ok {
			msg = msg.Copy()
			msg.Metadata = maps.Clone(msg.Metadata)
			delete(msg.Metadata, AttemptMetadataKey)
		}
		data, err := p.config.Marshaler.Marshal(topic, msg)
		if err != nil {
			return &MessageError{Topic: topic, UUID: msg.UUID, Err: fmt.Errorf("marshal: %w", err)}
		}
		batch[i] = stored{data: data, delay: d, at: at}
	}

	ctx, cancel := context.WithTimeout(msgs[0].Context(), p.config.OperationTimeout)
	defer cancel()

	p.groupsMu.Lock()
	groups := p.groups[topic]
	p.groupsMu.Unlock()
	// Groups only ever get added, so the publisher's view needs refreshing at most once per new
	// group; the script refuses a stale view without writing anything.
	for try := 0; ; try++ {
		expected, target := len(groups), groups
		if expected == 0 {
			target = []string{DefaultConsumerGroup}
		}
		err := p.store.publish(ctx, topic, expected, target, batch)
		var stale *errStaleGroups
		switch {
		case err == nil:
			p.groupsMu.Lock()
			p.groups[topic] = target
			p.groupsMu.Unlock()
			p.logger.Trace("Published", watermill.LogFields{"topic": topic, "messages": len(msgs)})
			return nil
		case errors.As(err, &stale) && try < 5:
			groups = stale.groups
		default:
			return fmt.Errorf("redisdelay: publish %d message(s) to topic %q (first UUID %q): %w", len(msgs), topic, msgs[0].UUID, err)
		}
	}
}

// Close makes further Publish calls return ErrPublisherClosed and waits for the ones under way.
// It never closes the Redis client. It is idempotent and always returns nil.
func (p *Publisher) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	p.closed = true
	return nil
}

// publishFunc adapts a function to message.Publisher, so that delay.NewPublisher can wrap it.
type publishFunc func(topic string, msgs ...*message.Message) error

func (f publishFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }

func (f publishFunc) Close() error { return nil }
