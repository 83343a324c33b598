package redisdelay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// beyond is a little more than MaxDelay: eleven years.
const beyond = redisdelay.MaxDelay + 365*24*time.Hour

// TestPublishRefusesDueTimesCapsAndDeadlinesBeyondMaxDelay: each way a message names a time
// ahead is refused past MaxDelay with a MessageError naming the topic, UUID, key and value, and
// nothing of the call is stored; just under MaxDelay is accepted.
func TestPublishRefusesDueTimesCapsAndDeadlinesBeyondMaxDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		now := time.Now()
		for _, tc := range []struct {
			name, key string
			msg       func(m *message.Message) *message.Message
		}{
			{"delay for", delay.DelayedForKey, func(m *message.Message) *message.Message {
				m.Metadata.Set(delay.DelayedForKey, beyond.String())
				return m
			}},
			{"delay until", delay.DelayedUntilKey, func(m *message.Message) *message.Message {
				m.Metadata.Set(delay.DelayedUntilKey, now.Add(beyond).UTC().Format(time.RFC3339))
				return m
			}},
			{"delay in the message's context", delay.DelayedForKey, func(m *message.Message) *message.Message {
				m.SetContext(delay.WithContext(context.Background(), delay.For(beyond)))
				return m
			}},
			{"debounce max wait of centuries", redisdelay.DebounceMaxWaitMetadataKey, func(m *message.Message) *message.Message {
				return redisdelay.WithDebounce(m, "doc-1", 200*365*24*time.Hour)
			}},
			{"deliver by", redisdelay.DeliverByMetadataKey, func(m *message.Message) *message.Message {
				return redisdelay.WithDeliverBy(m, now.Add(beyond))
			}},
			{"deliver within", redisdelay.DeliverWithinMetadataKey, func(m *message.Message) *message.Message {
				m.Metadata.Set(redisdelay.DeliverWithinMetadataKey, beyond.String())
				return m
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				bad := tc.msg(message.NewMessage("far-"+strings.ReplaceAll(tc.name, " ", "-"), nil))
				err := pub.Publish(topic, keyed("fine", 0, ""), bad)
				var me *redisdelay.MessageError
				require.ErrorAs(t, err, &me)
				assert.ErrorIs(t, err, redisdelay.ErrBeyondMaxDelay)
				assert.Equal(t, topic, me.Topic)
				assert.Equal(t, bad.UUID, me.UUID)
				assert.Equal(t, tc.key, me.Key)
				if tc.name != "delay in the message's context" {
					assert.Equal(t, bad.Metadata.Get(tc.key), me.Value)
				}
				assert.NotEmpty(t, me.Value)
				assert.Contains(t, err.Error(), "MaxDelay")
			})
		}
		assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "nothing of the calls is stored")

		near := redisdelay.MaxDelay - 24*time.Hour
		ok := redisdelay.WithDeliverBy(redisdelay.WithDebounce(message.NewMessage("near", nil), "doc-2", near), now.Add(near))
		ok.Metadata.Set(delay.DelayedForKey, near.String())
		assert.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, ok))
	})
}

func TestPublisherConfigRefusesCapsAndWindowsBeyondMaxDelay(t *testing.T) {
	b := embeddedRedis(t)
	for name, cfg := range map[string]redisdelay.PublisherConfig{
		"DebounceMaxWait": {Client: b.client, DebounceMaxWait: beyond},
		"DeliverWithin":   {Client: b.client, DeliverWithin: map[string]time.Duration{"orders": beyond}},
		"MaxWait":         {Client: b.client, Batching: map[string]redisdelay.BatchConfig{"orders": {MaxItems: 10, MaxWait: beyond}}},
	} {
		err := cfg.Validate()
		require.ErrorIs(t, err, redisdelay.ErrBeyondMaxDelay, name)
		assert.Contains(t, err.Error(), name)
		assert.Contains(t, err.Error(), beyond.String())
	}
}

// TestReschedulesBeyondMaxDelayAreRefusedAndChangeNothing covers Reschedule, RescheduleAfter
// and RescheduleRef: the error names the topic, the key or ref and the value, and the
// message's due time stays.
func TestReschedulesBeyondMaxDelayAreRefusedAndChangeNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("order-42", time.Hour, "")))
		page, err := in.List(ctx, topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1)
		ref, due := page.Messages[0].Ref, page.Messages[0].DueAt
		year36812 := time.Date(36812, 1, 1, 0, 0, 0, 0, time.UTC)

		for name, call := range map[string]func() error{
			"Reschedule": func() error { _, err := in.Reschedule(ctx, topic, redisdelay.ByKey("order-42"), year36812); return err },
			"RescheduleAfter": func() error {
				_, err := in.RescheduleAfter(ctx, topic, redisdelay.ByKey("order-42"), beyond)
				return err
			},
			"RescheduleRef": func() error {
				_, _, err := refOutcome(in.Reschedule(ctx, topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, ref), year36812))
				return err
			},
		} {
			err := call()
			require.ErrorIs(t, err, redisdelay.ErrBeyondMaxDelay, name)
			assert.Contains(t, err.Error(), topic, name)
			if name == "RescheduleRef" {
				assert.Contains(t, err.Error(), ref)
			} else {
				assert.Contains(t, err.Error(), "order-42", name)
			}
			assert.True(t, strings.Contains(err.Error(), "36812") || strings.Contains(err.Error(), beyond.String()), "%s names the value: %v", name, err)
		}
		st, err := in.Status(ctx, topic, redisdelay.ByKey("order-42"))
		require.NoError(t, err)
		assert.Equal(t, due, st.Groups[redisdelay.DefaultConsumerGroup].DueAt, "the due time stays")
	})
}
