package redisdelay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// forRedisAndMiniredis runs f as a parallel subtest against a real redis-server and miniredis.
func forRedisAndMiniredis(t *testing.T, f func(t *testing.T, b backend)) {
	for _, be := range []struct {
		name  string
		start func(*testing.T) backend
	}{{"redis", realRedis}, {"miniredis", embeddedRedis}} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, be.start(t))
		})
	}
}

// redisNow reads the Redis clock, which deadlines are compared with.
func redisNow(t *testing.T, b backend) time.Time {
	t.Helper()
	now, err := b.client.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// waitRedisPast waits until the Redis clock is past deadline, failing the test after 5 s.
func waitRedisPast(t *testing.T, b backend, deadline time.Time) {
	t.Helper()
	give := time.Now().Add(5 * time.Second)
	for !redisNow(t, b).After(deadline) {
		if time.Now().After(give) {
			t.Fatalf("the Redis clock did not pass %s within 5s", deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expiredCount returns how many messages of topic and group m heard expired with action.
func expiredCount(m *hookRecorder, topic, group string, action redisdelay.ExpiryAction) int {
	return m.count(hook{"expired", topic, group, string(action)})
}

// receiveAcked waits for one message, acks it and returns it.
func receiveAcked(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	msg := receive(t, ch, 5*time.Second)
	msg.Ack()
	return msg
}

func TestMessageClaimedAfterItsDeadlineIsDeadLetteredNotHandled(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, b backend) {
		topic, group := newTopic(), "billing"
		m := newHookRecorder()
		pub := newPublisher(t, b)

		// Published before any consumer of the group runs; its deadline passes meanwhile.
		deadline := redisNow(t, b).Add(50 * time.Millisecond)
		require.NoError(t, pub.Publish(topic, redisdelay.WithDeliverBy(message.NewMessage("late", []byte("x")), deadline)))
		waitRedisPast(t, b, deadline)

		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup, c.NewGroupWindow, c.Metrics = group, -1, m
		})
		ch := subscribe(t, sub, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("in-time", []byte("y"))))
		// "late" is due first and claimed first: the handler sees "in-time" only once the
		// group is done with "late".
		assert.Equal(t, "in-time", receiveAcked(t, ch).UUID, "the expired message is never handed out")

		assert.EqualValues(t, 1, expiredCount(m, topic, group, redisdelay.ExpiryActionDeadLetter))
		assert.EqualValues(t, 0, expiredCount(m, topic, group, redisdelay.ExpiryActionDrop))
		assert.EqualValues(t, 1, m.count(hook{"dead_lettered", topic, group, redisdelay.DeadLetterReasonExpired}))

		dlSub := newSubscriber(t, b, inGroup("ops"))
		letter := receiveAcked(t, subscribe(t, dlSub, redisdelay.DefaultDeadLetterTopic(topic, group)))
		assert.Equal(t, "late", letter.UUID)
		assert.Equal(t, redisdelay.DeadLetterReasonExpired, letter.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
		assert.Equal(t, "1", letter.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey))
		assert.Equal(t, topic, letter.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey))
		assert.Equal(t, group, letter.Metadata.Get(redisdelay.DeadLetterGroupMetadataKey))
		assert.Empty(t, letter.Metadata.Get(redisdelay.DeliverByMetadataKey), "a dead letter loses its deadline, so that its own groups and Requeue deliver it")
	})
}

func TestExpiredMessageIsDroppedWhenTheGroupSaysSo(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, b backend) {
		topic, group := newTopic(), "billing"
		m := newHookRecorder()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		dropping := func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup, c.NewGroupWindow, c.Metrics, c.OnExpired = group, -1, m, redisdelay.ExpiryActionDrop
		}

		// The baseline: the group registered, one message published and acked.
		first := newSubscriber(t, b, dropping)
		require.NoError(t, pub.Publish(topic, message.NewMessage("warm-up", nil)))
		assert.Equal(t, "warm-up", receiveAcked(t, subscribe(t, first, topic)).UUID)
		waitDrained(t, in, topic, group)
		require.NoError(t, first.Close())
		baseline := keysOfTopic(t, b, topic, true)

		deadline := redisNow(t, b).Add(50 * time.Millisecond)
		require.NoError(t, pub.Publish(topic, redisdelay.WithDeliverBy(message.NewMessage("late", []byte("x")), deadline)))
		waitRedisPast(t, b, deadline)
		ch := subscribe(t, newSubscriber(t, b, dropping), topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("in-time", nil)))
		assert.Equal(t, "in-time", receiveAcked(t, ch).UUID, "the expired message is never handed out")

		assert.EqualValues(t, 1, expiredCount(m, topic, group, redisdelay.ExpiryActionDrop))
		assert.EqualValues(t, 0, expiredCount(m, topic, group, redisdelay.ExpiryActionDeadLetter))
		assert.EqualValues(t, 0, m.count(hook{"dead_lettered", topic, group, redisdelay.DeadLetterReasonExpired}))
		s := waitStats(t, in, topic, group, "drained", func(s redisdelay.GroupStats) bool { return s.Scheduled+s.Due+s.InFlight == 0 })
		assert.Zero(t, s.DeadLetters, "nothing on the dead-letter topic")
		var keys []string
		deadlineKeys := time.Now().Add(drainTimeout)
		for {
			keys = keysOfTopic(t, b, topic, true)
			if assert.ObjectsAreEqual(baseline, keys) || time.Now().After(deadlineKeys) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		assert.Equal(t, baseline, keys, "the dropped message is gone: the keys are back to the baseline")
	})
}

func TestRetryOfAMessageClaimedInTimeIsDeliveredAfterItsDeadline(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, b backend) {
		topic := newTopic()
		m := newHookRecorder()
		pub := newPublisher(t, b)
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Metrics = m }), topic)

		// Generous, so that the running subscription claims it in time on a busy machine.
		deadline := redisNow(t, b).Add(time.Second)
		require.NoError(t, pub.Publish(topic, redisdelay.WithDeliverBy(message.NewMessage("m", nil), deadline)))
		first := receive(t, ch, 5*time.Second)
		require.Equal(t, "1", first.Metadata.Get(redisdelay.AttemptMetadataKey))
		waitRedisPast(t, b, deadline)
		first.Nack() // due again at once (ConstantBackoff(0)), claimed after the deadline

		retry := receiveAcked(t, ch)
		assert.Equal(t, "m", retry.UUID)
		assert.Equal(t, "2", retry.Metadata.Get(redisdelay.AttemptMetadataKey))
		due, err := time.Parse(time.RFC3339Nano, retry.Metadata.Get(redisdelay.DueTimeMetadataKey))
		require.NoError(t, err)
		assert.True(t, due.After(deadline), "the retry fell due after the deadline (%s, deadline %s)", due, deadline)
		assert.EqualValues(t, 0, expiredCount(m, topic, redisdelay.DefaultConsumerGroup, redisdelay.ExpiryActionDeadLetter))
	})
}

func TestDeliverWithinGivesATopicsMessagesADeadlineAfterTheirDueTime(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, b backend) {
		windowed, plain, group := newTopic(), newTopic(), "billing"
		const window = 100 * time.Millisecond
		m := newHookRecorder()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
			c.DeliverWithin = map[string]time.Duration{windowed: window}
		})
		require.NoError(t, pub.Publish(windowed, message.NewMessage("late", nil)))
		require.NoError(t, pub.Publish(plain, message.NewMessage("no-deadline", nil)))
		// Both are due by now (Redis clock): the window passes before any consumer runs.
		waitRedisPast(t, b, redisNow(t, b).Add(window))

		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup, c.NewGroupWindow, c.Metrics = group, -1, m
		})
		fromPlain := receiveAcked(t, subscribe(t, sub, plain))
		assert.Equal(t, "no-deadline", fromPlain.UUID, "a topic without DeliverWithin gives no deadline")
		assert.Empty(t, fromPlain.Metadata.Get(redisdelay.DeliverWithinMetadataKey))

		ch := subscribe(t, sub, windowed)
		own := message.NewMessage("own-deadline", nil)
		own.Metadata.Set(redisdelay.DeliverWithinMetadataKey, "1h")
		require.NoError(t, pub.Publish(windowed, own))
		got := receiveAcked(t, ch)
		assert.Equal(t, "own-deadline", got.UUID, "the windowed message claimed after its window is not handed out")
		assert.Equal(t, "1h", got.Metadata.Get(redisdelay.DeliverWithinMetadataKey), "a message's own deadline is kept")
		assert.EqualValues(t, 1, expiredCount(m, windowed, group, redisdelay.ExpiryActionDeadLetter))
		assert.EqualValues(t, 0, expiredCount(m, plain, group, redisdelay.ExpiryActionDeadLetter))

		letter := receiveAcked(t, subscribe(t, newSubscriber(t, b, inGroup("ops")), redisdelay.DefaultDeadLetterTopic(windowed, group)))
		assert.Equal(t, "late", letter.UUID)
		assert.Equal(t, redisdelay.DeadLetterReasonExpired, letter.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
	})
}

func TestBadDeadlineMetadataIsRefusedAtPublish(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
			c.Batching = map[string]redisdelay.BatchConfig{topic: {MaxItems: 10, MaxWait: time.Second}}
		})
		batchItem := redisdelay.WithDeliverBy(redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), nil), "b"), time.Now())
		for _, c := range []struct {
			msg        *message.Message
			key, value string
		}{
			{message.NewMessage(watermill.NewUUID(), nil), redisdelay.DeliverByMetadataKey, "tomorrow"},
			{message.NewMessage(watermill.NewUUID(), nil), redisdelay.DeliverByMetadataKey, "2030-01-01 12:00:00"},
			{message.NewMessage(watermill.NewUUID(), nil), redisdelay.DeliverWithinMetadataKey, "-5s"},
			{message.NewMessage(watermill.NewUUID(), nil), redisdelay.DeliverWithinMetadataKey, "soon"},
			{batchItem, redisdelay.DeliverByMetadataKey, batchItem.Metadata.Get(redisdelay.DeliverByMetadataKey)},
		} {
			c.msg.Metadata.Set(c.key, c.value)
			err := pub.Publish(topic, c.msg)
			require.Error(t, err, "%s=%s", c.key, c.value)
			assert.True(t, errors.Is(err, redisdelay.ErrInvalidMessage), "%v", err)
			var me *redisdelay.MessageError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, topic, me.Topic)
			assert.Equal(t, c.msg.UUID, me.UUID)
			assert.Equal(t, c.key, me.Key)
			assert.Equal(t, c.value, me.Value)
			for _, part := range []string{topic, c.msg.UUID, c.key, c.value} {
				assert.Contains(t, err.Error(), part)
			}
		}
		assert.Empty(t, keysOfTopic(t, b, topic, false), "nothing was stored")

		_, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, DeliverWithin: map[string]time.Duration{topic: 0}}, nil)
		assert.ErrorContains(t, err, "PublisherConfig.DeliverWithin")
		_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, OnExpired: "later"}, nil)
		assert.ErrorContains(t, err, "SubscriberConfig.OnExpired")
	})
}

// On the test kit's virtual clock, a deadline is read on the virtual Redis clock: a message due
// after its deadline expires when its due time comes, to the microsecond.
func TestDeadlinesFollowTheVirtualClock(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	const topic, group = "reminders", "mailer"
	q.Consume(topic, group)
	start := q.Now()
	msg := func(key string, deadline time.Time) *message.Message {
		m := redisdelay.WithDeliverBy(redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), nil), key), deadline)
		delay.Message(m, delay.For(time.Hour))
		return m
	}
	q.Publish(t, topic, msg("too-late", start.Add(time.Hour-time.Microsecond)), msg("just-in-time", start.Add(time.Hour)))
	q.Advance(time.Hour)
	q.RequireReceived(t, topic, group, "just-in-time")
	q.RequireNotReceived(t, topic, group, "too-late")
	s := statsOf(t, q.Inspector(), topic, group)
	assert.EqualValues(t, 1, s.DeadLetters, "the expired message waits on the dead-letter topic")
}

func TestExpiryDecision(t *testing.T) {
	const due, claimed = int64(1_000_000), int64(2_000_000)
	at := func(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }
	for _, c := range []struct {
		name     string
		md       message.Metadata
		attempt  int64
		expired  bool
		deadline int64
		bad      bool
	}{
		{"no deadline", message.Metadata{}, 1, false, 0, false},
		{"claimed after deliver-by", message.Metadata{redisdelay.DeliverByMetadataKey: at(claimed - 1)}, 1, true, claimed - 1, false},
		{"claimed at deliver-by is in time", message.Metadata{redisdelay.DeliverByMetadataKey: at(claimed)}, 1, false, claimed, false},
		{"a retry never expires", message.Metadata{redisdelay.DeliverByMetadataKey: at(0)}, 2, false, 0, false},
		{"within counts from the due time", message.Metadata{redisdelay.DeliverWithinMetadataKey: "999999us"}, 1, true, due + 999_999, false},
		{"within reaching the claim", message.Metadata{redisdelay.DeliverWithinMetadataKey: "1s"}, 1, false, due + 1_000_000, false},
		{"the earlier of both", message.Metadata{redisdelay.DeliverByMetadataKey: at(claimed + 5), redisdelay.DeliverWithinMetadataKey: "500ms"}, 1, true, due + 500_000, false},
		{"an unreadable value is ignored", message.Metadata{redisdelay.DeliverByMetadataKey: "soon"}, 1, false, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			deadline, expired, err := redisdelay.ExpiredAtClaimForTest(c.md, c.attempt, due, claimed)
			assert.Equal(t, c.expired, expired)
			if c.deadline != 0 {
				assert.Equal(t, c.deadline, deadline)
			}
			assert.Equal(t, c.bad, err != nil, "%v", err)
		})
	}
	// Claimed ahead of its due time (see claimAhead): checked as of the due time.
	deadline := at(due - 1)
	_, expired, err := redisdelay.ExpiredAtClaimForTest(message.Metadata{redisdelay.DeliverByMetadataKey: deadline}, 1, due, due-2_000)
	require.NoError(t, err)
	assert.True(t, expired, "a deadline between the claim ahead and the due time has passed when it is handed out")
}
