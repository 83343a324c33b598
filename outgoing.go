package redisdelay

// This file prepares one message for the publish script from its options (options.go): its
// partition, its due time, its key spec or batch spec, the topic's DeliverWithin window, and its
// marshaled form. Publish (publisher.go) prepares every message of a call before it commits any.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// outgoing prepares msg for topic: it returns what the publish script stores for it and its
// partition, roundRobin when nothing in msg names one, or a *MessageError when msg cannot be
// stored. now is the client time the delay metadata is read against, on a virtual clock when
// virtual (see scheduleOf).
func (p *Publisher) outgoing(topic string, msg *message.Message, now time.Time, virtual bool, roundRobin int) (store.Outgoing, int, error) {
	o, err := publishOptions(msg, &p.config, topic, now, virtual)
	if err != nil {
		var me *metadataError
		if errors.As(err, &me) {
			return store.Outgoing{}, 0, metadataMessageError(topic, msg, me)
		}
		return store.Outgoing{}, 0, &MessageError{Topic: topic, UUID: msg.UUID, Err: err}
	}
	partition, spec := p.partitionOf(o, roundRobin), o.keySpec(p.config.KeyRetention)
	if o.batched {
		cfg := p.config.Batching[topic]
		spec = store.BatchSpec(cfg.MaxItems, cfg.MaxWait, cfg.maxBytes(), o.batchKey)
		partition = keyPartition(o.batchKey, p.config.Partitions)
	}
	data, err := p.marshalOutgoing(topic, withDeliverWithin(msg, o, p.config.DeliverWithin[topic]))
	if err != nil {
		return store.Outgoing{}, 0, err
	}
	out := store.Outgoing{Data: data, Delay: o.delay, At: o.at, Latest: o.latest, KeySpec: spec}
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

// partitionOf returns the partition of a message with options o: from its key when it has one,
// so that the Inspector finds it by the key alone, else from its PartitionKey metadata when it
// has it, else roundRobin.
func (p *Publisher) partitionOf(o options, roundRobin int) int {
	switch {
	case p.config.Partitions == 1:
		return 0
	case o.keyed:
		return keyPartition(o.key, p.config.Partitions)
	case o.hasPartitionKey:
		return keyPartition(o.partitionKey, p.config.Partitions)
	}
	return roundRobin
}

// keyPartition is the partition of a key on a topic with the given number of partitions:
// FNV-1a of the key modulo partitions, as for PublisherConfig.PartitionKey.
func keyPartition(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}
