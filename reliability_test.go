package redisdelay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

func TestNackedOnLastAttemptBecomesDeadLetter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 3 })
		ch := subscribe(t, sub, topic)
		dlt := redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)
		dead := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "ops" })
		deadCh := subscribe(t, dead, dlt)

		msg := message.NewMessage("webhook-1", []byte(`{"url":"https://example.test/hook"}`))
		msg.Metadata.Set("tenant", "acme")
		require.NoError(t, pub.Publish(topic, msg))
		for attempt := 1; attempt <= 3; attempt++ {
			got := receive(t, ch, 2*time.Second)
			require.Equal(t, fmt.Sprint(attempt), got.Metadata.Get(redisdelay.AttemptMetadataKey))
			got.Nack()
		}

		letter := receive(t, deadCh, 2*time.Second)
		assert.Equal(t, "webhook-1", letter.UUID)
		assert.Equal(t, `{"url":"https://example.test/hook"}`, string(letter.Payload))
		assert.Equal(t, "acme", letter.Metadata.Get("tenant"))
		assert.Equal(t, topic, letter.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey))
		assert.Equal(t, redisdelay.DefaultConsumerGroup, letter.Metadata.Get(redisdelay.DeadLetterGroupMetadataKey))
		assert.Equal(t, "3", letter.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey))
		assert.Equal(t, redisdelay.DeadLetterReasonNacked, letter.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
		assert.Equal(t, "1", letter.Metadata.Get(redisdelay.AttemptMetadataKey), "a dead letter starts its own attempts")
		letter.Ack()

		// Moved, not copied: the group holds nothing more.
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
	})
}

func TestExpiredLeasesRunOutOfAttemptsIntoDeadLetterTopic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		const lease = 200 * time.Millisecond
		cfg := func(c *redisdelay.SubscriberConfig) {
			c.LeaseTimeout = lease
			c.MaxAttempts = 1
			c.OperationTimeout = 100 * time.Millisecond
		}
		doomed := newClientLike(b)
		crashed := newSubscriber(t, backend{name: b.name, client: doomed}, cfg)
		ch := subscribe(t, crashed, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("job", nil)))
		receive(t, ch, 2*time.Second)
		require.NoError(t, doomed.Close()) // the consumer dies holding its only attempt

		survivor := newSubscriber(t, b, cfg)
		subscribe(t, survivor, topic)
		dead := newSubscriber(t, b, nil)
		deadCh, err := dead.Subscribe(context.Background(), redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup))
		require.NoError(t, err)

		letter := receive(t, deadCh, 3*time.Second)
		assert.Equal(t, "job", letter.UUID)
		assert.Equal(t, redisdelay.DeadLetterReasonLeaseExpired, letter.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
		assert.Equal(t, "1", letter.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey))
		letter.Ack()
		// The survivor claimed it only to dead-letter it: the group holds nothing more.
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
	})
}

func TestRetryScheduleIsFollowedThenGivesUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		schedule := redisdelay.ScheduleBackoff{100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond}
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.NackBackoff = schedule
			c.MaxAttempts = schedule.MaxAttempts()
		})
		ch := subscribe(t, sub, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("notify", nil)))

		msg := receive(t, ch, 2*time.Second)
		for _, wait := range schedule {
			nackedAt := time.Now()
			msg.Nack()
			msg = receive(t, ch, 2*time.Second)
			waited := time.Since(nackedAt)
			assert.GreaterOrEqual(t, waited, wait)
			assert.Less(t, waited, wait+250*time.Millisecond)
		}
		assert.Equal(t, "4", msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Nack() // the schedule is used up: give up

		dead := newSubscriber(t, b, nil)
		deadCh, err := dead.Subscribe(context.Background(), redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup))
		require.NoError(t, err)
		letter := receive(t, deadCh, 2*time.Second)
		assert.Equal(t, "4", letter.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey))
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup) // given up: no fifth attempt
	})
}

func TestNotifyRetryScheduleMatchesTheSeed(t *testing.T) {
	want := []time.Duration{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, 10 * time.Minute,
		20 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour,
		3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour}
	for i, d := range want {
		assert.Equal(t, d, redisdelay.NotifyRetrySchedule.NackDelay(i+1), "after attempt %d", i+1)
	}
	assert.Equal(t, 16, redisdelay.NotifyRetrySchedule.MaxAttempts(), "one delivery and 15 retries, then give up")
}

func TestUnlimitedAttemptsNeverDeadLetter(t *testing.T) {
	b := embeddedRedis(t)
	topic := newTopic()
	pub := newPublisher(t, b)
	sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = redisdelay.UnlimitedAttempts })
	ch := subscribe(t, sub, topic)
	require.NoError(t, pub.Publish(topic, message.NewMessage("stubborn", nil)))
	for i := 1; i <= 40; i++ {
		msg := receive(t, ch, time.Second)
		require.Equal(t, fmt.Sprint(i), msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Nack()
	}
	dlt := redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)
	assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, dlt), "nothing was dead-lettered")
}

func TestBadInputIsRejectedWholeNamingTopicUUIDAndKey(t *testing.T) {
	b := embeddedRedis(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, MaxMessageBytes: 1000}, nil)
	require.NoError(t, err)
	withMeta := func(key, value string) *message.Message {
		m := message.NewMessage("bad-one", []byte("x"))
		m.Metadata.Set(key, value)
		return m
	}
	cases := []struct {
		name    string
		topic   string
		msg     *message.Message
		key     string // "" when the error is not about a metadata key
		mention string
	}{
		{"unparseable delayed_until", "orders", withMeta(delay.DelayedUntilKey, "next tuesday"), delay.DelayedUntilKey, "next tuesday"},
		{"unparseable delayed_for", "orders", withMeta(delay.DelayedForKey, "30 minutes"), delay.DelayedForKey, "30 minutes"},
		{"delay beyond MaxDelay", "orders", withMeta(delay.DelayedForKey, "1000000h"), delay.DelayedForKey, "MaxDelay"},
		{"until beyond MaxDelay", "orders", withMeta(delay.DelayedUntilKey, "2999-01-01T00:00:00Z"), delay.DelayedUntilKey, "MaxDelay"},
		{"reserved metadata key", "orders", withMeta("_redisdelay_lease", "forever"), "_redisdelay_lease", "reserved"},
		{"payload over MaxMessageBytes", "orders", message.NewMessage("bad-one", make([]byte, 2000)), "", "MaxMessageBytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := message.NewMessage("good-one", []byte("fine"))
			err := pub.Publish(c.topic, good, c.msg)
			require.Error(t, err)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
			var me *redisdelay.MessageError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, c.topic, me.Topic)
			assert.Equal(t, "bad-one", me.UUID)
			assert.Equal(t, c.key, me.Key)
			for _, s := range []string{c.topic, "bad-one", c.key, c.mention} {
				assert.Contains(t, err.Error(), s)
			}
			assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, c.topic), "nothing of the batch is stored")
		})
	}

	names := []struct{ name, topic string }{
		{"empty topic", ""},
		{"hash-tag braces", "orders{1}"},
		{"closing brace", "orders}"},
		{"very long topic", strings.Repeat("t", redisdelay.MaxNameLength+1)},
	}
	for _, c := range names {
		t.Run(c.name, func(t *testing.T) {
			err := pub.Publish(c.topic, message.NewMessage("m", nil))
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName)
			sub := newSubscriber(t, b, nil)
			_, err = sub.Subscribe(context.Background(), c.topic)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName)
			assert.ErrorIs(t, sub.SubscribeInitialize(c.topic), redisdelay.ErrInvalidName)
		})
	}
	for _, group := range []string{"g{1}", strings.Repeat("g", redisdelay.MaxNameLength+1)} {
		_, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, ConsumerGroup: group}, nil)
		assert.ErrorContains(t, err, "ConsumerGroup")
	}
	keys, err := b.client.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "no bad input left anything in Redis")
}

func TestColonsInNamesDoNotMixTopicsOrGroups(t *testing.T) {
	b := embeddedRedis(t)
	pub := newPublisher(t, b)
	in := newInspector(t, b, 1)
	// ':' separates key parts, but the topic sits between braces and group suffixes are fixed,
	// so these names stay apart.
	subA := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "x" })
	subB := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "x:due" })
	for _, topic := range []string{"a", "a:b", "a:g"} {
		require.NoError(t, subA.SubscribeInitialize(topic))
		require.NoError(t, subB.SubscribeInitialize(topic))
		require.NoError(t, pub.Publish(topic, message.NewMessage(topic, nil)))
	}
	// Each group holds exactly its topic's message.
	for _, topic := range []string{"a", "a:b", "a:g"} {
		for _, group := range []string{"x", "x:due"} {
			assert.Equal(t, int64(1), statsOf(t, in, topic, group).Due, "topic %s, group %s", topic, group)
		}
	}
	for _, topic := range []string{"a", "a:b", "a:g"} {
		for group, sub := range map[string]*redisdelay.Subscriber{"x": subA, "x:due": subB} {
			ch := subscribe(t, sub, topic)
			msg := receive(t, ch, time.Second)
			assert.Equal(t, topic, msg.UUID)
			msg.Ack()
			waitDrained(t, in, topic, group)
		}
	}
}

func TestCorruptStoredMessageIsRemovedAndDeliveryGoesOn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		pub := newPublisher(t, b)

		// With two groups the messages sit in the topic's hash: corrupt one, delete another.
		shared := newTopic()
		subA := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "a" })
		subB := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "b" })
		require.NoError(t, subA.SubscribeInitialize(shared))
		require.NoError(t, subB.SubscribeInitialize(shared))
		require.NoError(t, pub.Publish(shared, message.NewMessage("first", nil), message.NewMessage("second", nil), message.NewMessage("third", nil)))
		stored := redisdelay.MessagesKeyForTest("", shared)
		ids, err := b.client.HKeys(ctx, stored).Result()
		require.NoError(t, err)
		require.Len(t, ids, 3)
		slices.Sort(ids)
		require.NoError(t, b.client.HSet(ctx, stored, ids[0], "\xff garbage").Err()) // undecodable
		require.NoError(t, b.client.HDel(ctx, stored, ids[1]).Err())                 // vanished

		ch, err := subA.Subscribe(ctx, shared)
		require.NoError(t, err)
		msg := receive(t, ch, 2*time.Second)
		assert.Equal(t, "third", msg.UUID)
		msg.Ack()
		require.NoError(t, subA.Close())
		due, lease := redisdelay.GroupKeysForTest("", shared, "a")
		assert.Zero(t, b.client.ZCard(ctx, due).Val())
		assert.Zero(t, b.client.ZCount(ctx, lease, "-inf", "(1e300").Val())

		// With one group a scheduled message is part of its due member: corrupt one there. (No
		// new-group window, which would keep the message in the hash for later groups.)
		single := newTopic()
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.NewGroupWindow = -1 })
		require.NoError(t, sub.SubscribeInitialize(single))
		require.NoError(t, pub.Publish(single, message.NewMessage("fine", nil)))
		due, lease = redisdelay.GroupKeysForTest("", single, redisdelay.DefaultConsumerGroup)
		require.NoError(t, b.client.ZAdd(ctx, due, redis.Z{Score: 0, Member: "000000000000|\xff garbage"}).Err())
		ch, err = sub.Subscribe(ctx, single)
		require.NoError(t, err)
		msg = receive(t, ch, 2*time.Second)
		assert.Equal(t, "fine", msg.UUID)
		msg.Ack()
		require.NoError(t, sub.Close())
		assert.Zero(t, b.client.ZCard(ctx, due).Val())
		assert.Zero(t, b.client.ZCount(ctx, lease, "-inf", "(1e300").Val())
		assert.Zero(t, b.client.HLen(ctx, redisdelay.MessagesKeyForTest("", single)).Val(), "the corrupt message is cleaned up")
	})
}

// TestSubscriberRecoversWhenRedisComesUp: Subscribe does not fail while Redis is down, and the
// subscription receives what is published once it is up. (Close while Redis is down or frozen:
// TestCloseReturnsWithinOperationTimeoutWhenRedisDoesNotAnswer.)
func TestSubscriberRecoversWhenRedisComesUp(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := backend{name: "redis", client: srv.Client(t)}
	srv.Stop()

	topic := newTopic()
	sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.OperationTimeout = 300 * time.Millisecond })
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err, "Subscribe does not fail while Redis is down")

	require.NoError(t, srv.Restart())
	pub := newPublisher(t, b)
	require.Eventually(t, func() bool { return pub.Publish(topic, message.NewMessage("after-outage", nil)) == nil }, 5*time.Second, 50*time.Millisecond)
	msg := receive(t, ch, 10*time.Second)
	assert.Equal(t, "after-outage", msg.UUID)
	msg.Ack()
	waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
}
