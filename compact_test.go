package redisdelay_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// compactPublisher returns a Publisher whose compact tier has horizon h (the package's tests
// allow horizons below MinCompactHorizon).
func compactPublisher(t *testing.T, b backend, h time.Duration) *redisdelay.Publisher {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, CompactHorizon: h}, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// dueAt returns message i of a run, due at the absolute time at (delay.Until), its UUID its
// index.
func dueAt(i int, at time.Time) *message.Message {
	msg := message.NewMessage(strconv.Itoa(i), []byte("payload "+strconv.Itoa(i)))
	delay.Message(msg, delay.Until(at))
	return msg
}

// publishShuffled publishes n messages (dueAt(i, ...)) in one call, in random order, message i
// due at start plus i steps, and returns their due times by i.
func publishShuffled(t *testing.T, pub message.Publisher, topic string, n int, start time.Time, step time.Duration) []time.Time {
	t.Helper()
	due := make([]time.Time, n)
	var batch []*message.Message
	for _, i := range rand.Perm(n) {
		due[i] = start.Add(time.Duration(i) * step)
		batch = append(batch, dueAt(i, due[i]))
	}
	require.NoError(t, pub.Publish(topic, batch...))
	return due
}

// inDueOrder checks that msg's due time (DueTimeMetadataKey, the Redis clock's) is not before
// previous, the due time of the message delivered before it, and returns it.
func inDueOrder(t *testing.T, msg *message.Message, previous time.Time) time.Time {
	t.Helper()
	due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
	require.NoError(t, err)
	assert.False(t, due.Before(previous), "message %s due at %s delivered after one due at %s", msg.UUID, due, previous)
	return due
}

// TestCompactTierDeliversEveryMessageInDueOrderNeverEarly: messages due several horizons ahead
// wait in the compact tier (Stats counts them there), move into the due set bucket by bucket
// and are delivered exactly once each, never before their due time and in due-time order; once
// all are acked, the topic's keys are back to their baseline.
func TestCompactTierDeliversEveryMessageInDueOrderNeverEarly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const n, horizon = 300, 100 * time.Millisecond
		topic := "compact-order-" + b.name
		pub := compactPublisher(t, b, horizon)
		in := newInspector(t, b, 1)
		msgs := subscribe(t, newSubscriber(t, b, nil), topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("warm-up", nil)))
		receive(t, msgs, 5*time.Second).Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		baseline := keysOfTopic(t, b, topic, true)

		// Due 0.5 to 1.4 s ahead, 3 ms apart, published in random order in one call (the
		// Publisher turns an absolute due time into a delay, which Redis adds to its clock when
		// the call runs: calls of their own could swap messages due a few ms apart).
		due := publishShuffled(t, pub, topic, n, time.Now().Add(500*time.Millisecond), 3*time.Millisecond)
		st := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, int64(n), st.Scheduled, "scheduled after publishing")
		assert.Greater(t, st.Compact, int64(n/2), "messages in the compact tier right after publishing")

		seen := map[string]bool{}
		var previous time.Time
		for range n {
			msg := receive(t, msgs, 10*time.Second)
			got := time.Now()
			i, err := strconv.Atoi(msg.UUID)
			require.NoError(t, err)
			assert.False(t, seen[msg.UUID], "message %d delivered twice", i)
			seen[msg.UUID] = true
			assert.False(t, got.Before(due[i]), "message %d delivered %s early", i, due[i].Sub(got))
			previous = inDueOrder(t, msg, previous)
			msg.Ack()
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		require.Eventually(t, func() bool {
			return assert.ObjectsAreEqual(baseline, keysOfTopic(t, b, topic, true))
		}, 5*time.Second, 10*time.Millisecond, "keys without an expiry back to the baseline")
	})
}

// TestCompactTierKeepsDueOrderAfterDowntime: with no subscription running, more messages fall
// due than one claim moves from the compact tier; a subscription started afterwards still
// receives them in due-time order, since claims take nothing due after a bucket not yet moved.
func TestCompactTierKeepsDueOrderAfterDowntime(t *testing.T) {
	b := realRedis(t)
	const n, horizon = 1500, 50 * time.Millisecond
	topic := "compact-downtime"
	pub := compactPublisher(t, b, horizon)
	in := newInspector(t, b, 1)
	// Register the group, then stop consuming.
	sub := newSubscriber(t, b, nil)
	_ = subscribe(t, sub, topic)
	require.NoError(t, sub.Close())

	due := publishShuffled(t, pub, topic, n, time.Now().Add(300*time.Millisecond), time.Millisecond)
	st := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
	require.Greater(t, st.Compact, int64(500), "messages in the compact tier")
	last := due[n-1]
	waitStats(t, in, topic, redisdelay.DefaultConsumerGroup, "past the last due time", func(redisdelay.GroupStats) bool { return time.Now().After(last) })

	msgs := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ClaimBatchSize = 50 }), topic)
	var previous time.Time
	for range n {
		msg := receive(t, msgs, 10*time.Second)
		previous = inDueOrder(t, msg, previous)
		msg.Ack()
	}
	waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
}

// TestCompactTierIsEmptiedByRemoveGroupAndPurge: the compact tier of a consumer group goes with
// the group's removal and with a purge of its scheduled messages; messages held by two groups
// stay stored for the other until both are done; at the end no key of the topic is left but the
// registry's.
func TestCompactTierIsEmptiedByRemoveGroupAndPurge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := "compact-cleanup-" + b.name
		pub := compactPublisher(t, b, 20*time.Millisecond)
		in := newInspector(t, b, 1)
		for _, g := range []string{"a", "b"} {
			sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = g })
			require.NoError(t, sub.SubscribeInitialize(topic))
		}
		var batch []*message.Message
		for i := range 700 {
			batch = append(batch, dueAt(i, time.Now().Add(time.Hour+time.Duration(i)*time.Second)))
		}
		require.NoError(t, pub.Publish(topic, batch...))
		for _, g := range []string{"a", "b"} {
			st := statsOf(t, in, topic, g)
			assert.Equal(t, int64(700), st.Compact, "group %s: in the compact tier", g)
			assert.Equal(t, int64(700), st.Scheduled, "group %s: scheduled", g)
		}

		dropped, err := in.RemoveGroup(ctx, topic, "a")
		require.NoError(t, err)
		assert.Equal(t, int64(700), dropped, "dropped by the removal of group a")
		st := statsOf(t, in, topic, "b")
		assert.Equal(t, int64(700), st.Compact, "group b keeps its compact tier")

		purged, err := in.Purge(ctx, topic, "b", redisdelay.StateScheduled)
		require.NoError(t, err)
		assert.Equal(t, int64(700), purged, "purged from group b")
		st = statsOf(t, in, topic, "b")
		assert.Zero(t, st.Scheduled+st.Compact, "group b after the purge: %+v", st)
		_, err = in.RemoveGroup(ctx, topic, "b")
		require.NoError(t, err)
		keys := keysOfTopic(t, b, topic, true)
		for _, k := range keys {
			assert.NotContains(t, k, ":far", "compact-tier key left")
			assert.NotContains(t, k, ":msg", "stored messages left")
		}
	})
}

// TestCompactTierStoresAndMovesOnceWhenScriptsRunTwice: every publish and every claim script
// runs twice, as when go-redis repeats a command whose reply was lost. The publish's call key
// and the claim's record make the second run act no more: each message is stored once in the
// compact tier, moved once, and delivered once, never early.
func TestCompactTierStoresAndMovesOnceWhenScriptsRunTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var reruns atomic.Int64
		twice := func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			reruns.Add(1)
			return next(ctx, cmd)
		}
		client := faultyClient(t, b, scriptFault{match: func(keys []string) bool { return isPublishCall(keys) || isClaimCall(keys) }, around: twice})
		const n = 200
		topic := "compact-twice-" + b.name
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, CompactHorizon: 50 * time.Millisecond}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ClaimBatchSize: 20}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		require.NoError(t, sub.SubscribeInitialize(topic))
		in := newInspector(t, b, 1)

		due := publishShuffled(t, pub, topic, n, time.Now().Add(300*time.Millisecond), 3*time.Millisecond)
		st := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		require.Equal(t, int64(n), st.Scheduled, "each message stored once")
		require.Greater(t, st.Compact, int64(n/2), "in the compact tier")

		msgs := subscribe(t, sub, topic)
		seen := map[string]bool{}
		for range n {
			msg := receive(t, msgs, 10*time.Second)
			i, err := strconv.Atoi(msg.UUID)
			require.NoError(t, err)
			assert.False(t, seen[msg.UUID], "message %d delivered twice", i)
			seen[msg.UUID] = true
			assert.False(t, time.Now().Before(due[i]), "message %d delivered early", i)
			msg.Ack()
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Greater(t, reruns.Load(), int64(10), "scripts run twice")
	})
}

// TestForecastCountsTheCompactTier: Inspector.Forecast counts the messages of the compact tier
// in the bucket of their time bucket's start, which with a short horizon is their due time's.
func TestForecastCountsTheCompactTier(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := "compact-forecast-" + b.name
		pub := compactPublisher(t, b, 20*time.Millisecond)
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		in := newInspector(t, b, 1)
		// 240 messages, one every 5 minutes from 90 s ahead on: 12 per hour.
		start := time.Now().Add(90 * time.Second)
		var batch []*message.Message
		for i := range 240 {
			batch = append(batch, dueAt(i, start.Add(time.Duration(i)*5*time.Minute)))
		}
		require.NoError(t, pub.Publish(topic, batch...))
		require.Equal(t, int64(240), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).Compact, "in the compact tier")

		f, err := in.Forecast(context.Background(), topic, redisdelay.DefaultConsumerGroup, time.Hour, 10)
		require.NoError(t, err)
		var counted int64
		for k, c := range f.Counts {
			counted += c
			assert.InDelta(t, 12, c, 1, "hour %d", k)
		}
		assert.Equal(t, int64(240), counted+f.Later+f.Due, "every message counted once")
		assert.Zero(t, f.Due, "none due yet")
	})
}

// TestRunNowRefAndRescheduleRefReachTheCompactTier: operations by ref on messages that wait in
// the compact tier move them to the due set and act there: run now delivers one at once,
// reschedule delivers the other at its new due time, never before; the rest stay in the tier.
func TestRunNowRefAndRescheduleRefReachTheCompactTier(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := "compact-refops-" + b.name
		pub := compactPublisher(t, b, 20*time.Millisecond)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		var batch []*message.Message
		for i := range 5 {
			batch = append(batch, dueAt(i, time.Now().Add(time.Hour+time.Duration(i)*time.Minute)))
		}
		require.NoError(t, pub.Publish(topic, batch...))
		page, err := in.List(ctx, topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 5)
		refs := map[string]string{}
		for _, m := range page.Messages {
			refs[m.UUID] = m.Ref
		}

		o, _, err := refOutcome(in.RunNow(ctx, topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["1"])))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o, "run now")
		at := time.Now().Add(300 * time.Millisecond)
		o, due, err := refOutcome(in.Reschedule(ctx, topic, redisdelay.ByRef(redisdelay.DefaultConsumerGroup, refs["3"]), at))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o, "reschedule")
		assert.WithinDuration(t, at, due, time.Millisecond, "the new due time")
		st := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, int64(3), st.Compact, "left in the compact tier")

		msgs := subscribe(t, sub, topic)
		first := receive(t, msgs, 5*time.Second)
		assert.Equal(t, "1", first.UUID, "run now first")
		first.Ack()
		second := receive(t, msgs, 5*time.Second)
		assert.Equal(t, "3", second.UUID, "then the rescheduled one")
		assert.False(t, time.Now().Before(at), "rescheduled message delivered early")
		second.Ack()
		waitStats(t, in, topic, redisdelay.DefaultConsumerGroup, "three scheduled, none due or in flight", func(s redisdelay.GroupStats) bool {
			return s.Scheduled == 3 && s.Due+s.InFlight == 0
		})
	})
}
