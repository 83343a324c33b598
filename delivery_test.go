package redisdelay_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func newTopic() string { return "topic-" + watermill.NewShortUUID() }

func TestDelayedMessageIsNeverDeliveredEarly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, nil)
		msgs := subscribe(t, sub, topic)

		delays := []time.Duration{0, 7 * time.Millisecond, 55 * time.Millisecond, 333 * time.Millisecond, 999 * time.Millisecond, 1234 * time.Millisecond}
		published := map[string]time.Time{}
		wanted := map[string]time.Duration{}
		for i, d := range delays {
			msg := message.NewMessage(fmt.Sprintf("m%d", i), []byte("x"))
			delay.Message(msg, delay.For(d))
			published[msg.UUID] = time.Now()
			wanted[msg.UUID] = d
			require.NoError(t, pub.Publish(topic, msg))
		}

		for range delays {
			msg := receive(t, msgs, 5*time.Second)
			waited := time.Since(published[msg.UUID])
			d := wanted[msg.UUID]
			assert.GreaterOrEqual(t, waited, d, "message %s with delay %s arrived after %s", msg.UUID, d, waited)
			assert.Less(t, waited, d+300*time.Millisecond, "message %s with delay %s arrived after %s", msg.UUID, d, waited)
			msg.Ack()
		}
	})
}

func TestDelayWithContextNeedsNoWrapper(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, nil)
		msgs := subscribe(t, sub, topic)

		msg := message.NewMessage(watermill.NewUUID(), []byte("cancel order 42"))
		msg.SetContext(delay.WithContext(context.Background(), delay.For(400*time.Millisecond)))
		start := time.Now()
		require.NoError(t, pub.Publish(topic, msg))
		published := time.Now()

		// The delay from the context is stored: the message is scheduled 400 ms after its publish.
		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1, "scheduled, not due yet")
		dueAt := page.Messages[0].DueAt
		assert.Equal(t, msg.UUID, page.Messages[0].UUID)
		assert.False(t, dueAt.Before(start.Add(400*time.Millisecond)) || dueAt.After(published.Add(400*time.Millisecond)),
			"due at %s, want 400ms after the publish, between %s and %s", dueAt, start, published)
		got := receive(t, msgs, 2*time.Second)
		assert.False(t, time.Now().Before(dueAt), "delivered before its due time %s", dueAt)
		assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
		assert.Equal(t, msg.UUID, got.UUID)
		assert.Equal(t, "cancel order 42", string(got.Payload))
		assert.Equal(t, "400ms", got.Metadata.Get(delay.DelayedForKey))
		got.Ack()
	})
}

func TestRepublishedPastDueMessageIsNotDelayedAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, nil)
		msgs := subscribe(t, sub, topic)

		// A message whose delay elapsed an hour ago, as a poison queue re-publishes it.
		old := message.NewMessage("old", nil)
		old.Metadata.Set(delay.DelayedUntilKey, time.Now().Add(-time.Hour).Format(time.RFC3339))
		old.Metadata.Set(delay.DelayedForKey, (30 * time.Minute).String())
		start := time.Now()
		require.NoError(t, pub.Publish(topic, old))
		got := receive(t, msgs, time.Second)
		assert.Equal(t, "old", got.UUID)
		assert.Less(t, time.Since(start), 200*time.Millisecond)
		got.Ack()

		// A message re-published by its handler right after its 3 s delay elapsed waits at
		// most for the 1 s truncation of _watermill_delayed_until, not 3 s again.
		fresh := message.NewMessage("fresh", nil)
		delay.Message(fresh, delay.For(3*time.Second))
		require.NoError(t, pub.Publish(topic, fresh))
		got = receive(t, msgs, 5*time.Second)
		got.Ack()
		start = time.Now()
		require.NoError(t, pub.Publish(topic, got))
		again := receive(t, msgs, 3*time.Second)
		assert.Less(t, time.Since(start), 1200*time.Millisecond)
		assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptMetadataKey), "a re-published message starts at attempt 1")
		again.Ack()
	})
}

func TestEqualDueTimesComeOutInPublishOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))

		// Every message names the same due instant, so all get the same score.
		due := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
		var want []string
		for batch := 0; batch < 10; batch++ {
			var msgs []*message.Message
			for i := 0; i < 20; i++ {
				msg := message.NewMessage(fmt.Sprintf("%03d", batch*20+i), nil)
				msg.Metadata.Set(delay.DelayedUntilKey, due.Format(time.RFC3339))
				msgs = append(msgs, msg)
				want = append(want, msg.UUID)
			}
			require.NoError(t, pub.Publish(topic, msgs...))
		}

		ch := subscribe(t, sub, topic)
		var got []string
		for range want {
			msg := receive(t, ch, 5*time.Second)
			assert.False(t, time.Now().Before(due), "delivered before its due time")
			got = append(got, msg.UUID)
			msg.Ack()
		}
		assert.Equal(t, want, got)
	})
}

func TestEveryGroupReceivesEveryMessageAndGroupMembersCompete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		const count = 300

		type received struct {
			mu   sync.Mutex
			uuid map[string]int
		}
		groups := map[string]*received{"billing": {uuid: map[string]int{}}, "shipping": {uuid: map[string]int{}}}
		perSubscriber := map[string]int{}
		var perSubscriberMu sync.Mutex
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		total := make(chan struct{}, 2*count)
		for group, r := range groups {
			for i := 0; i < 3; i++ {
				sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = group })
				ch, err := sub.Subscribe(ctx, topic)
				require.NoError(t, err)
				name := fmt.Sprintf("%s-%d", group, i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for msg := range ch {
						r.mu.Lock()
						r.uuid[msg.UUID]++
						r.mu.Unlock()
						perSubscriberMu.Lock()
						perSubscriber[name]++
						perSubscriberMu.Unlock()
						time.Sleep(time.Millisecond) // a little work, so members share the load
						msg.Ack()
						total <- struct{}{}
					}
				}()
			}
		}

		for i := 0; i < count; i++ {
			require.NoError(t, pub.Publish(topic, message.NewMessage(strconv.Itoa(i), nil)))
		}
		deadline := time.After(20 * time.Second)
		for i := 0; i < 2*count; i++ {
			select {
			case <-total:
			case <-deadline:
				t.Fatalf("only %d of %d deliveries within 20s", i, 2*count)
			}
		}
		// Nothing is held any more, so nothing can come twice after this: the counts below are
		// final.
		in := newInspector(t, b, 1)
		for group := range groups {
			waitDrained(t, in, topic, group)
		}
		cancel()
		wg.Wait()

		for group, r := range groups {
			assert.Len(t, r.uuid, count, "group %s", group)
			for id, n := range r.uuid {
				assert.Equal(t, 1, n, "group %s got %s %d times", group, id, n)
			}
		}
		for group := range groups {
			for i := 0; i < 3; i++ {
				name := fmt.Sprintf("%s-%d", group, i)
				assert.Greater(t, perSubscriber[name], 0, "subscriber %s got nothing: the members of a group share its messages", name)
			}
		}
	})
}

func TestExpiredLeaseRedeliversWithNextAttempt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		const lease = 300 * time.Millisecond

		// The first consumer uses its own connection, which then dies: it can neither extend
		// the lease nor release the message, as after a crash.
		doomed := newClientLike(b)
		crashed := newSubscriber(t, backend{name: b.name, client: doomed}, func(c *redisdelay.SubscriberConfig) {
			c.LeaseTimeout = lease
			c.OperationTimeout = 200 * time.Millisecond
		})
		ch := subscribe(t, crashed, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("job", []byte("payload"))))
		first := receive(t, ch, 2*time.Second)
		assert.Equal(t, "1", first.Metadata.Get(redisdelay.AttemptMetadataKey))
		crashedAt := time.Now()
		require.NoError(t, doomed.Close())

		survivor := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = lease })
		ch2 := subscribe(t, survivor, topic)
		second := receive(t, ch2, 3*time.Second)
		assert.GreaterOrEqual(t, time.Since(crashedAt), lease-50*time.Millisecond, "redelivered before the lease could expire")
		assert.Equal(t, "job", second.UUID)
		assert.Equal(t, "payload", string(second.Payload))
		assert.Equal(t, "2", second.Metadata.Get(redisdelay.AttemptMetadataKey))
		second.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // no third attempt is left to come
	})
}

func TestHeartbeatKeepsASlowHandlersLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		const lease = 200 * time.Millisecond
		cfg := func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = lease }
		slow := newSubscriber(t, b, cfg)
		other := newSubscriber(t, b, cfg)
		ch := subscribe(t, slow, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("long-job", nil)))
		msg := receive(t, ch, 2*time.Second)
		subscribe(t, other, topic) // a competing consumer, which would claim an expired lease

		// The handler runs for three lease timeouts: its lease is extended past three times its
		// first deadline, and never lost, since the message stays in flight on its first attempt.
		var first time.Time
		for {
			page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateInFlight})
			require.NoError(t, err)
			require.Len(t, page.Messages, 1)
			held := page.Messages[0]
			require.Equal(t, "long-job", held.UUID)
			require.Equal(t, 1, held.Attempt, "the lease was lost and the message claimed again")
			if first.IsZero() {
				first = held.LeaseDeadline
			}
			if held.LeaseDeadline.After(first.Add(3 * lease)) {
				break
			}
			require.True(t, time.Now().Before(first.Add(10*lease)), "the lease was not extended: its deadline is still %s", held.LeaseDeadline)
			time.Sleep(lease / 10)
		}
		require.True(t, msg.Ack())
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // the ack was taken: nothing comes again
	})
}

func TestNackedMessageComesBackAfterBackoff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		const backoff = 300 * time.Millisecond
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.NackBackoff = redisdelay.ConstantBackoff(backoff) })
		ch := subscribe(t, sub, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("flaky", nil), message.NewMessage("fine", nil)))

		flaky := receive(t, ch, 2*time.Second)
		require.Equal(t, "flaky", flaky.UUID)
		nackedAt := time.Now()
		flaky.Nack()
		fine := receive(t, ch, time.Second)
		assert.Equal(t, "fine", fine.UUID, "a nacked message does not block the next one")
		fine.Ack()

		again := receive(t, ch, 2*time.Second)
		assert.Equal(t, "flaky", again.UUID)
		assert.GreaterOrEqual(t, time.Since(nackedAt), backoff)
		assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptMetadataKey))
		again.Ack()
	})
}

func TestNackHonoursDelayOnErrorMetadata(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.NackBackoff = redisdelay.ConstantBackoff(time.Hour) })
		ch := subscribe(t, sub, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("webhook", nil)))

		// The middleware sets the delay metadata when the handler fails; the router then nacks.
		failing := (&middleware.DelayOnError{InitialInterval: 500 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2}).
			Middleware(func(*message.Message) ([]*message.Message, error) { return nil, fmt.Errorf("endpoint down") })

		msg := receive(t, ch, 2*time.Second)
		_, err := failing(msg)
		require.Error(t, err)
		nackedAt := time.Now()
		msg.Nack()

		again := receive(t, ch, 3*time.Second)
		waited := time.Since(nackedAt)
		assert.GreaterOrEqual(t, waited, 500*time.Millisecond)
		assert.Less(t, waited, 1500*time.Millisecond, "the 1h nack backoff must not apply")
		assert.Equal(t, "500ms", again.Metadata.Get(delay.DelayedForKey), "the changed metadata is stored")
		assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptMetadataKey))

		// The next failure doubles the delay, because the stored metadata carried the last one.
		_, _ = failing(again)
		nackedAt = time.Now()
		again.Nack()
		third := receive(t, ch, 3*time.Second)
		assert.GreaterOrEqual(t, time.Since(nackedAt), time.Second)
		assert.Equal(t, "3", third.Metadata.Get(redisdelay.AttemptMetadataKey))
		third.Ack()
	})
}

func TestCloseReleasesClaimedMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		cfg := func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = time.Minute }
		first := newSubscriber(t, b, cfg)
		require.NoError(t, first.SubscribeInitialize(topic))
		const count = 50
		var all []*message.Message
		for i := 0; i < count; i++ {
			all = append(all, message.NewMessage(fmt.Sprintf("%02d", i), nil))
		}
		require.NoError(t, pub.Publish(topic, all...))

		ch := subscribe(t, first, topic)
		for i := 0; i < 10; i++ { // lets the claim size grow, so more are claimed than delivered
			receive(t, ch, time.Second).Ack()
		}
		unacked := receive(t, ch, time.Second)
		require.NoError(t, first.Close())
		_, open := <-ch
		assert.False(t, open, "Close closes the output channel")

		due, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
		ctx := context.Background()
		assert.Zero(t, b.client.ZCount(ctx, lease, "-inf", "(1e300").Val(), "no lease survives Close")
		assert.EqualValues(t, count-10, b.client.ZCard(ctx, due).Val())

		second := newSubscriber(t, b, cfg)
		ch2 := subscribe(t, second, topic)
		var got []string
		for i := 0; i < count-10; i++ {
			msg := receive(t, ch2, time.Second) // far less than the one-minute lease
			wantAttempt := "1"
			if msg.UUID == unacked.UUID {
				wantAttempt = "2"
			}
			assert.Equal(t, wantAttempt, msg.Metadata.Get(redisdelay.AttemptMetadataKey), msg.UUID)
			got = append(got, msg.UUID)
			msg.Ack()
		}
		assert.True(t, slices.IsSorted(got), "released messages keep their due order: %v", got)
		assert.Equal(t, unacked.UUID, got[0])
	})
}

func TestPayloadIsFreedWhenTheLastGroupAcks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		// No new-group window, which would keep the payload for groups registering later.
		a := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup, c.NewGroupWindow = "a", -1 })
		bb := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "b" })
		require.NoError(t, a.SubscribeInitialize(topic))
		require.NoError(t, bb.SubscribeInitialize(topic))
		require.NoError(t, pub.Publish(topic, message.NewMessage("shared", []byte("stored once"))))
		stored := redisdelay.MessagesKeyForTest("", topic)
		ctx := context.Background()
		require.EqualValues(t, 1, b.client.HLen(ctx, stored).Val(), "the payload is stored once for both groups")

		chA, err := a.Subscribe(ctx, topic)
		require.NoError(t, err)
		receive(t, chA, time.Second).Ack()
		require.NoError(t, a.Close()) // flushes the ack
		assert.EqualValues(t, 1, b.client.HLen(ctx, stored).Val(), "group b still needs it")

		chB, err := bb.Subscribe(ctx, topic)
		require.NoError(t, err)
		receive(t, chB, time.Second).Ack()
		require.NoError(t, bb.Close())
		assert.Zero(t, b.client.HLen(ctx, stored).Val(), "freed after the last group acked")
	})
}

func TestPublishIsAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		good := message.NewMessage("good", nil)
		bad := message.NewMessage("bad", nil)
		bad.Metadata.Set(delay.DelayedForKey, "soon")
		err := pub.Publish(topic, good, bad)

		var me *redisdelay.MessageError
		require.ErrorAs(t, err, &me)
		assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
		assert.Equal(t, topic, me.Topic)
		assert.Equal(t, "bad", me.UUID)
		assert.Equal(t, delay.DelayedForKey, me.Key)
		assert.Equal(t, "soon", me.Value)
		assert.Contains(t, err.Error(), topic)
		assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "nothing of the batch is stored")
		require.NoError(t, pub.Publish(topic, good))
		assert.EqualValues(t, 1, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "the count sees a stored message")
	})
}

func TestClosedPublisherAndSubscriberRefuseWork(t *testing.T) {
	b := embeddedRedis(t)
	pub := newPublisher(t, b)
	sub := newSubscriber(t, b, nil)
	ch, err := sub.Subscribe(context.Background(), "t")
	require.NoError(t, err)
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close())
	require.NoError(t, sub.Close())
	require.NoError(t, sub.Close())
	_, open := <-ch
	assert.False(t, open)
	assert.ErrorIs(t, pub.Publish("t", message.NewMessage("x", nil)), redisdelay.ErrPublisherClosed)
	_, err = sub.Subscribe(context.Background(), "t")
	assert.ErrorIs(t, err, redisdelay.ErrSubscriberClosed)
	assert.ErrorIs(t, sub.SubscribeInitialize("t"), redisdelay.ErrSubscriberClosed)
}
