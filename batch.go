package redisdelay

// This file owns keyed batching's message side: the released batch's payload and UnpackBatch.
// (WithBatchKey is in metadata.go; the Inspector acts on an open batch in inspector_target.go.)

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Keyed batching: messages published with a batch key to a topic configured for batching
// (PublisherConfig.Batching) join that key's open batch, which is released as one message when
// it reaches MaxItems (or MaxBytes), in the same script call as the item that fills it, or
// MaxWait after its first item, on the Redis clock, never early. Items go through the publish
// script like any message (see publish_to in lua/lib), so concurrent publishes share calls.

// batchMessage builds the message of a released batch of topic partition partition from its
// stored value: a trigger letter and the length-prefixed items. Its UUID is batchUUID's, the
// same on every attempt; its payload is the items as stored (UnpackBatch reads them).
func batchMessage(id, batchKey string, partition int, data []byte) (*message.Message, error) {
	if len(data) < 1 {
		return nil, fmt.Errorf("%w: empty batch %s", ErrCorruptMessage, quote(batchKey))
	}
	trigger := map[byte]string{'s': BatchTriggerSize, 't': BatchTriggerTime, 'f': BatchTriggerFlush}[data[0]]
	items, err := batchItems(data[1:])
	if err != nil || trigger == "" {
		return nil, fmt.Errorf("%w: batch %s: %v", ErrCorruptMessage, quote(batchKey), err)
	}
	msg := message.NewMessage(batchUUID(id, partition), data[1:])
	setBatchMetadata(msg, batchKey, trigger, len(items))
	return msg, nil
}

// batchPreview is batchMessage for the first bytes of a batch's stored value, as List reads
// them: the payload is the items' first bytes, and the metadata has no BatchItemsMetadataKey
// (counting the items would take the whole value).
func batchPreview(id, batchKey string, partition int, data []byte) (*message.Message, error) {
	trigger := ""
	if len(data) > 0 {
		trigger = map[byte]string{'s': BatchTriggerSize, 't': BatchTriggerTime, 'f': BatchTriggerFlush}[data[0]]
	}
	if trigger == "" {
		return nil, fmt.Errorf("%w: batch %s: unknown trigger", ErrCorruptMessage, quote(batchKey))
	}
	msg := message.NewMessage(batchUUID(id, partition), data[1:])
	setBatchMetadata(msg, batchKey, trigger, -1)
	return msg, nil
}

// batchUUID is the UUID of the batch with internal ID id on a topic partition: "batch-" and the
// ID's 12 hex digits, and for partition n >= 1 "-" and n, since each partition counts its IDs:
// unique per topic across partitions and over time, and the same on every attempt.
func batchUUID(id string, partition int) string {
	if partition == 0 {
		return "batch-" + store.Seq(id)
	}
	return "batch-" + store.Seq(id) + "-" + strconv.Itoa(partition)
}

// batchItems splits a batch payload into its items: each is its length in decimal, ':' and
// its bytes.
func batchItems(payload []byte) ([][]byte, error) {
	var items [][]byte
	for len(payload) > 0 {
		colon := bytes.IndexByte(payload, ':')
		if colon <= 0 {
			return nil, errors.New("malformed item length")
		}
		n, err := strconv.Atoi(string(payload[:colon]))
		if err != nil || n < 0 || colon+1+n > len(payload) {
			return nil, errors.New("malformed item length")
		}
		items = append(items, payload[colon+1:colon+1+n])
		payload = payload[colon+1+n:]
	}
	return items, nil
}

// UnpackBatch returns the items of a released batch (a message with BatchKeyMetadataKey from a
// Subscriber), in the order they were published, each with its UUID, metadata and payload as
// published, decoded with u (the publisher's Marshaler; DefaultMarshalerUnmarshaler when nil).
// Errors wrap ErrCorruptMessage when the payload is not a batch.
func UnpackBatch(msg *message.Message, u Unmarshaler) ([]*message.Message, error) {
	if u == nil {
		u = DefaultMarshalerUnmarshaler{}
	}
	if batchKeyOf(msg) == "" {
		return nil, fmt.Errorf("%w: message %s is not a batch", ErrCorruptMessage, quote(msg.UUID))
	}
	items, err := batchItems(msg.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: batch %s: %v", ErrCorruptMessage, quote(msg.UUID), err)
	}
	out := make([]*message.Message, len(items))
	for i, data := range items {
		if out[i], err = u.Unmarshal("", data); err != nil {
			return nil, fmt.Errorf("batch %s item %d: %w", quote(msg.UUID), i+1, err)
		}
	}
	return out, nil
}
