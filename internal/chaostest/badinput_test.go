//go:build chaos

package chaostest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// Scenario 7. Bad input through the public API: every Publish returns an error that names what
// is wrong, nothing panics, and nothing of the batch is stored, not even its valid messages.
func TestBadInputIsRefusedWholeWithoutPanic(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := newClient(t, srv.Addr)
	logger := newLogger(t.Name())
	topic, group := newTopic(), "chaos"
	sub := newSubscriber(t, client, group, logger, nil)
	require.NoError(t, sub.SubscribeInitialize(topic))
	pub := newPublisher(t, client, logger, nil)
	l := newLedger()

	withMetadata := func(key, value string) func() *message.Message {
		return func() *message.Message {
			msg := newMessage(0, nil)
			msg.Metadata.Set(key, value)
			return msg
		}
	}
	for _, c := range []struct {
		name  string
		topic string
		bad   func() *message.Message // the offending message, nil for a bad topic
		key   string                  // the metadata key a *MessageError must name
	}{
		{name: "nil message", topic: topic, bad: func() *message.Message { return nil }},
		{name: "unparseable delayed_for", topic: topic, bad: withMetadata(delay.DelayedForKey, "soon"), key: delay.DelayedForKey},
		{name: "unparseable delayed_until", topic: topic, bad: withMetadata(delay.DelayedUntilKey, "tomorrow"), key: delay.DelayedUntilKey},
		{name: "delay above MaxDelay", topic: topic, bad: withMetadata(delay.DelayedForKey, (redisdelay.MaxDelay + time.Hour).String()), key: delay.DelayedForKey},
		{name: "reserved key", topic: topic, bad: withMetadata(redisdelay.ReservedMetadataPrefix+"x", "1"), key: redisdelay.ReservedMetadataPrefix + "x"},
		{name: "above MaxMessageBytes", topic: topic, bad: func() *message.Message {
			return newMessage(0, make([]byte, redisdelay.DefaultMaxMessageBytes))
		}},
		{name: "topic with braces", topic: "chaos.{bad}"},
		{name: "empty topic", topic: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The batch: a valid message, the offending one (if any), another valid one.
			msgs := []*message.Message{newMessage(0, nil)}
			var bad *message.Message
			if c.bad != nil {
				bad = c.bad()
				msgs = append(msgs, bad)
			}
			msgs = append(msgs, newMessage(0, nil))
			err, panicked := publishRecovering(l, pub, c.topic, msgs)
			require.Nil(t, panicked, "Publish panicked")
			require.Error(t, err, "Publish accepted the batch")
			t.Logf("error: %v", err)

			var me *redisdelay.MessageError
			switch {
			case errors.As(err, &me):
				assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
				assert.Equal(t, c.topic, me.Topic, "MessageError.Topic")
				assert.Contains(t, err.Error(), c.topic, "the error names the topic")
				if bad != nil {
					assert.Equal(t, bad.UUID, me.UUID, "MessageError.UUID")
					assert.Contains(t, err.Error(), bad.UUID, "the error names the UUID")
				}
				assert.Equal(t, c.key, me.Key, "MessageError.Key")
			case errors.Is(err, redisdelay.ErrInvalidName):
				assert.Nil(t, c.bad, "a bad message was reported as a bad name")
				if c.topic != "" {
					assert.Contains(t, err.Error(), c.topic, "the error names the topic")
				}
			default:
				t.Errorf("the error is neither a *redisdelay.MessageError nor wraps ErrInvalidName: %T %v", err, err)
			}
		})
	}

	// Nothing was stored: a marker published now is the first message the group gets (all are
	// due at once, so they come in publish order), and every key in Redis is the valid topic's.
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	marker := newMessage(0, nil)
	require.NoError(t, l.publish(pub, topic, time.Now(), []time.Duration{0}, marker))
	var before []string
	for i := 0; ; i++ {
		require.Less(t, i, maxReceives, "the marker did not come within %d messages", maxReceives)
		msg := receive(t, ch, 10*time.Second)
		l.deliver(msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now())
		msg.Ack()
		if msg.UUID == marker.UUID {
			break
		}
		before = append(before, msg.UUID)
	}
	require.NoError(t, sub.Close())
	assert.Empty(t, before, "messages of refused batches were delivered")

	var foreign []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, "*", 1000).Iterator()
	for n := 0; iter.Next(ctx) && n < 100000; n++ {
		// The topic registry is the one key without a hash tag; it holds only the valid topic.
		if !strings.Contains(iter.Val(), "{"+topic+"}") && iter.Val() != redisdelay.DefaultKeyPrefix+"topics" {
			foreign = append(foreign, iter.Val())
		}
	}
	require.NoError(t, iter.Err())
	assert.Empty(t, foreign, "keys outside the valid topic's hash tag")
	registered, err := client.HKeys(context.Background(), redisdelay.DefaultKeyPrefix+"topics").Result()
	require.NoError(t, err)
	for _, name := range registered {
		assert.True(t, strings.HasPrefix(name, topic), "only the valid topic (and its dead-letter topics) is registered: %q", name)
	}
	l.report(t, "bad-input")
}

// publishRecovering publishes through the ledger and turns a panic into a value.
func publishRecovering(l *ledger, pub *redisdelay.Publisher, topic string, msgs []*message.Message) (err error, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprint(r)
		}
	}()
	return l.publish(pub, topic, time.Now(), make([]time.Duration, len(msgs)), msgs...), nil
}
