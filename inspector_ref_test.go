package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestOperationsByRefActOnOneMessageOfOneGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		publishDelayed(t, pub, topic, "m", 3, time.Hour)
		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 3)
		refs := map[string]string{}
		for _, m := range page.Messages {
			refs[m.UUID] = m.Ref
		}

		o, err := outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["m0"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		o, err = outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["m0"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeNotFound, o, "cancelled already")

		o, due, err := refOutcome(in.Reschedule(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["m2"]), time.Now().Add(300*time.Millisecond)))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		o, _, err = refOutcome(in.RunNow(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["m1"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)

		ch := subscribe(t, sub, topic)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, "m1", msg.UUID)
		msg.Ack()
		msg = receive(t, ch, 5*time.Second)
		assert.Equal(t, "m2", msg.UUID)
		assert.False(t, time.Now().Before(due), "never early against the new due time")
		msg.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // not the cancelled m0
		_, err = in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, "not-a-ref"))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

// A message stored in its member (the only group, no new-group window) has a short ref, its
// ID and due time, which every operation by ref resolves; once its due time changes, the old
// ref names nothing and a new list gives the new one.
func TestShortRefsNameMessagesStoredInTheirMembers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, inGroupWithoutWindow(redisdelay.DefaultConsumerGroup))
		require.NoError(t, sub.SubscribeInitialize(topic))
		publishDelayed(t, pub, topic, "m", 3, time.Hour)
		refs := func() map[string]string {
			page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
			require.NoError(t, err)
			out := map[string]string{}
			for _, m := range page.Messages {
				assert.Contains(t, m.Ref, ".", "a short ref")
				out[m.UUID] = m.Ref
			}
			return out
		}
		first := refs()
		require.Len(t, first, 3)
		m, err := in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first["m1"]))
		require.NoError(t, err)
		assert.Equal(t, "payload of m1", string(m.Payload))
		assert.Equal(t, first["m1"], m.Ref)

		o, err := outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first["m0"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		o, err = outcome(in.Cancel(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first["m0"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeNotFound, o, "cancelled already")

		o, due, err := refOutcome(in.Reschedule(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first["m2"]), time.Now().Add(300*time.Millisecond)))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		_, err = in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, first["m2"]))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound, "the old ref names the old due time")
		second := refs()
		assert.NotEqual(t, first["m2"], second["m2"])
		m, err = in.Message(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, second["m2"]))
		require.NoError(t, err)
		assert.Equal(t, "payload of m2", string(m.Payload))

		o, _, err = refOutcome(in.RunNow(context.Background(), topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, second["m1"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		ch := subscribe(t, sub, topic)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, "m1", msg.UUID)
		msg.Ack()
		msg = receive(t, ch, 5*time.Second)
		assert.Equal(t, "m2", msg.UUID)
		assert.False(t, time.Now().Before(due), "never early against the new due time")
		msg.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // not the cancelled m0
	})
}
