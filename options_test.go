package redisdelay

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPublishOptionsAreOneTypedValueOfTheMetadata(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := &PublisherConfig{PartitionKey: "tenant", OnDuplicate: ReplaceExisting, DebounceMaxWait: time.Minute, Batching: map[string]BatchConfig{"batched": {}}}
	for _, tc := range []struct {
		name  string
		topic string
		md    message.Metadata
		want  options
	}{
		{"plain", "t", message.Metadata{"other": "x"}, options{}},
		{"delay and partition key", "t", message.Metadata{delay.DelayedForKey: "90s", "tenant": "acme"},
			options{received: received{delayedFor: "90s"}, delay: 90 * time.Second, partitionKey: "acme", hasPartitionKey: true}},
		{"key: the config's policy, no cap", "t", message.Metadata{KeyMetadataKey: "k"},
			options{received: received{key: "k", keyed: true}, policy: ReplaceExisting}},
		{"debounce: the config's cap", "t", message.Metadata{KeyMetadataKey: "k", OnDuplicateMetadataKey: "keep-later"},
			options{received: received{key: "k", keyed: true}, policy: KeepLater, maxWait: time.Minute}},
		{"debounce: its own cap", "t", message.Metadata{KeyMetadataKey: "k", OnDuplicateMetadataKey: "keep-later", DebounceMaxWaitMetadataKey: "5s"},
			options{received: received{key: "k", keyed: true}, policy: KeepLater, maxWait: 5 * time.Second}},
		{"deadlines", "t", message.Metadata{DeliverByMetadataKey: "2026-01-02T03:04:06Z", DeliverWithinMetadataKey: "30s"},
			options{received: received{deliverByUs: now.Add(time.Second).UnixMicro(), hasDeliverBy: true, deliverWithin: 30 * time.Second}}},
		{"batch item", "batched", message.Metadata{BatchKeyMetadataKey: "b"}, options{received: received{batchKey: "b", batched: true}}},
		{"delivery and dead-letter keys are accepted", "t", message.Metadata{AttemptMetadataKey: "2", DeadLetterReasonMetadataKey: "nacked"}, options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := publishOptions(&message.Message{UUID: "u", Metadata: tc.md}, cfg, tc.topic, now, false)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPublishOptionsRefuseTheFirstProblemNamingItsEntry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := &PublisherConfig{Batching: map[string]BatchConfig{"batched": {}}}
	for _, tc := range []struct {
		name, topic string
		md          message.Metadata
		key         string // the entry the error names
	}{
		{"bad delay before a reserved key", "t", message.Metadata{delay.DelayedForKey: "soon", ReservedMetadataPrefix + "x": "1"}, delay.DelayedForKey},
		{"reserved key before a bad deadline", "t", message.Metadata{ReservedMetadataPrefix + "x": "1", DeliverByMetadataKey: "soon"}, ReservedMetadataPrefix + "x"},
		{"a released batch's keys are not publishable", "t", message.Metadata{BatchItemsMetadataKey: "3"}, BatchItemsMetadataKey},
		{"bad deadline before a bad key", "t", message.Metadata{DeliverWithinMetadataKey: "-1s", KeyMetadataKey: ""}, DeliverWithinMetadataKey},
		{"a cap without a key", "t", message.Metadata{DebounceMaxWaitMetadataKey: "5s"}, DebounceMaxWaitMetadataKey},
		{"unknown policy", "t", message.Metadata{KeyMetadataKey: "k", OnDuplicateMetadataKey: "first"}, OnDuplicateMetadataKey},
		{"a batch item on a topic without batching", "t", message.Metadata{BatchKeyMetadataKey: "b"}, BatchKeyMetadataKey},
		{"a batch item with a key", "batched", message.Metadata{BatchKeyMetadataKey: "b", KeyMetadataKey: "k"}, KeyMetadataKey},
		{"a batch item with a delay", "batched", message.Metadata{BatchKeyMetadataKey: "b", delay.DelayedUntilKey: "2026-01-02T03:04:05Z"}, delay.DelayedUntilKey},
		{"a batch item with a deadline", "batched", message.Metadata{BatchKeyMetadataKey: "b", DeliverWithinMetadataKey: "1s"}, DeliverWithinMetadataKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := publishOptions(&message.Message{UUID: "u", Metadata: tc.md}, cfg, tc.topic, now, false)
			var me *metadataError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, tc.key, me.key, "%v", err)
			assert.Equal(t, tc.md[tc.key], me.value)
		})
	}
}

func TestReceivedOptionsSetTheKeyAndIgnoreAnUnreadableDeadline(t *testing.T) {
	msg := message.NewMessage("u", nil)
	msg.Metadata.Set(DeliverByMetadataKey, "soon")
	msg.Metadata.Set(DeliverWithinMetadataKey, "1s")
	msg.Metadata.Set(delay.DelayedForKey, "1m")
	o := receivedOptions(msg, "order-42", true)
	assert.Equal(t, "order-42", msg.Metadata.Get(KeyMetadataKey), "the key, stored apart, is on the delivered message")
	assert.True(t, o.keyed)
	assert.Equal(t, "order-42", o.key)
	assert.False(t, o.hasDeliverBy)
	assert.Equal(t, time.Second, o.deliverWithin)
	assert.Error(t, o.badDeadline)
	assert.Equal(t, "1m", o.delayedFor)
}
