package redisdelay

// This file prepares one message for the publish script: its partition, its schedule (delay
// metadata), its key spec, the checks of its reserved metadata (deadlines included) and of a
// batch item, the topic's DeliverWithin window, and its marshaled form. Publish (publisher.go)
// prepares every message of a call before it commits any.

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// outgoing prepares msg for topic: it returns what the publish script stores for it and its
// partition, roundRobin when nothing in msg names one, or a *MessageError when msg cannot be
// stored. now is the client time the delay metadata is read against, on a virtual clock when
// virtual (see scheduleOf).
func (p *Publisher) outgoing(topic string, msg *message.Message, now time.Time, virtual bool, roundRobin int) (store.Outgoing, int, error) {
	partition := p.partitionOf(msg, roundRobin)
	d, at, latest, err := scheduleOf(msg, now, virtual)
	if err != nil {
		var me *metadataError
		if errors.As(err, &me) {
			return store.Outgoing{}, 0, metadataMessageError(topic, msg, me)
		}
		return store.Outgoing{}, 0, &MessageError{Topic: topic, UUID: msg.UUID, Err: err}
	}
	if err := checkReservedMetadata(msg); err != nil {
		return store.Outgoing{}, 0, metadataMessageError(topic, msg, err)
	}
	if err := checkDeadlines(msg, now); err != nil {
		return store.Outgoing{}, 0, metadataMessageError(topic, msg, err)
	}
	spec, keyErr := keySpecOf(msg, p.config.OnDuplicate, p.config.KeyRetention, p.config.DebounceMaxWait)
	if keyErr != nil {
		return store.Outgoing{}, 0, metadataMessageError(topic, msg, keyErr)
	}
	bk, isBatched := msg.Metadata[BatchKeyMetadataKey]
	if isBatched {
		if err := p.checkBatchItem(topic, msg, bk); err != nil {
			return store.Outgoing{}, 0, err
		}
	}
	if !isBatched {
		msg = withDeliverWithin(msg, p.config.DeliverWithin[topic])
	}
	data, err := p.marshalOutgoing(topic, msg)
	if err != nil {
		return store.Outgoing{}, 0, err
	}
	if isBatched {
		cfg := p.config.Batching[topic]
		spec = store.BatchSpec(cfg.MaxItems, cfg.MaxWait, cfg.maxBytes(), bk)
		partition = keyPartition(bk, p.config.Partitions)
	}
	out := store.Outgoing{Data: data, Delay: d, At: at, Latest: latest, KeySpec: spec}
	if !virtual {
		out.From = now // the wait for a group commit round does not make it later
	}
	return out, partition, nil
}

// metadataMessageError is the *MessageError for msg on topic whose metadata e refused.
func metadataMessageError(topic string, msg *message.Message, e *metadataError) *MessageError {
	return &MessageError{Topic: topic, UUID: msg.UUID, Key: e.key, Value: e.value, Err: e.err}
}

// marshalOutgoing marshals msg for topic without the delivery keys it may carry from a
// Subscriber, and refuses it with a *MessageError when it is more than MaxMessageBytes.
func (p *Publisher) marshalOutgoing(topic string, msg *message.Message) ([]byte, error) {
	msg = withoutDeliveryMetadata(msg)
	data, err := p.config.Marshaler.Marshal(topic, msg)
	if err != nil {
		return nil, &MessageError{Topic: topic, UUID: msg.UUID, Err: fmt.Errorf("marshal: %w", err)}
	}
	if len(data) > p.config.MaxMessageBytes {
		return nil, &MessageError{Topic: topic, UUID: msg.UUID, Err: fmt.Errorf("message is %d bytes marshaled (payload %d), more than MaxMessageBytes %d", len(data), len(msg.Payload), p.config.MaxMessageBytes)}
	}
	return data, nil
}

// partitionOf returns the partition of msg: from its key (KeyMetadataKey) when it has one, so
// that the Inspector finds it by the key alone, else from the PartitionKey metadata when msg
// has it, else roundRobin.
func (p *Publisher) partitionOf(msg *message.Message, roundRobin int) int {
	if p.config.Partitions == 1 {
		return 0
	}
	if key, ok := msg.Metadata[KeyMetadataKey]; ok {
		return keyPartition(key, p.config.Partitions)
	}
	if key, ok := msg.Metadata[p.config.PartitionKey]; ok && p.config.PartitionKey != "" {
		return keyPartition(key, p.config.Partitions)
	}
	return roundRobin
}

// checkBatchItem refuses a batch item that cannot be stored: a topic without batching, a bad
// batch key, or a message key as well.
func (p *Publisher) checkBatchItem(topic string, msg *message.Message, bk string) error {
	if _, ok := p.config.Batching[topic]; !ok {
		return &MessageError{Topic: topic, UUID: msg.UUID, Key: BatchKeyMetadataKey, Value: bk, Err: errors.New("the topic is not configured for batching (PublisherConfig.Batching)")}
	}
	if err := ValidateKey(bk); err != nil {
		return &MessageError{Topic: topic, UUID: msg.UUID, Key: BatchKeyMetadataKey, Value: bk, Err: err}
	}
	if _, keyed := msg.Metadata[KeyMetadataKey]; keyed {
		return &MessageError{Topic: topic, UUID: msg.UUID, Key: KeyMetadataKey, Value: msg.Metadata[KeyMetadataKey], Err: errors.New("a batch item cannot have a message key")}
	}
	for _, k := range []string{delay.DelayedForKey, delay.DelayedUntilKey} {
		if v, ok := msg.Metadata[k]; ok {
			return &MessageError{Topic: topic, UUID: msg.UUID, Key: k, Value: v, Err: errors.New("a batch item cannot have a delay: its batch's MaxWait decides when it is delivered")}
		}
	}
	for _, k := range []string{DeliverByMetadataKey, DeliverWithinMetadataKey} {
		if v, ok := msg.Metadata[k]; ok {
			return &MessageError{Topic: topic, UUID: msg.UUID, Key: k, Value: v, Err: errors.New("a batch item cannot have a deliver-by deadline: a released batch is delivered as one message, which has none")}
		}
	}
	return nil
}
