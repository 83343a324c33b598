package redisdelay_test

import (
	"context"
	"encoding/base64"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// publishDelayed publishes n messages due after d, with UUIDs prefix0..prefix(n-1).
func publishDelayed(t *testing.T, pub *redisdelay.Publisher, topic, prefix string, n int, d time.Duration) {
	t.Helper()
	var msgs []*message.Message
	for i := range n {
		msg := message.NewMessage(prefix+strconv.Itoa(i), []byte("payload of "+prefix+strconv.Itoa(i)))
		if d > 0 {
			delay.Message(msg, delay.For(d))
		}
		msgs = append(msgs, msg)
	}
	require.NoError(t, pub.Publish(topic, msgs...))
}

func statsOf(t *testing.T, in *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	t.Helper()
	all, err := in.Stats(context.Background(), topic)
	require.NoError(t, err)
	for _, s := range all {
		if s.Group == group {
			return s
		}
	}
	t.Fatalf("no stats for group %s on topic %s in %+v", group, topic, all)
	return redisdelay.GroupStats{}
}

func TestTopicsListsEveryTopicWithItsGroups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "t" + watermill.NewShortUUID() + ":"
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, KeyPrefix: prefix}, errorLogger{})
		require.NoError(t, err)
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		require.NoError(t, pub.Publish("orders", message.NewMessage("1", nil)))
		for _, g := range []string{"billing", "shipping"} {
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, KeyPrefix: prefix, ConsumerGroup: g, Partitions: 2}, errorLogger{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Close() })
			require.NoError(t, sub.SubscribeInitialize("payments"))
		}
		topics, err := in.Topics(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []redisdelay.TopicInfo{
			{Topic: "orders", Partitions: 1, Groups: []string{}},
			{Topic: "payments", Partitions: 2, Groups: []string{"billing", "shipping"}},
			{Topic: "payments.dead-letter.billing", Partitions: 2, Groups: []string{}},
			{Topic: "payments.dead-letter.shipping", Partitions: 2, Groups: []string{}},
		}, topics)

		_, err = in.Stats(context.Background(), "unknown")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		assert.ErrorContains(t, err, "unknown")
		assert.ErrorIs(t, in.Pause(context.Background(), "payments", "nobody"), redisdelay.ErrNotFound)
	})
}

func TestStatsCountEveryState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 1 })
		require.NoError(t, sub.SubscribeInitialize(topic))

		// Two dead letters, then one message held in flight.
		publishDelayed(t, pub, topic, "dead", 2, 0)
		ch := subscribe(t, sub, topic)
		for range 2 {
			receive(t, ch, 5*time.Second).Nack()
		}
		publishDelayed(t, pub, topic, "held", 1, 0)
		held := receive(t, ch, 5*time.Second)
		require.Equal(t, "held0", held.UUID)
		require.NoError(t, in.Pause(context.Background(), topic, redisdelay.DefaultConsumerGroup))
		publishDelayed(t, pub, topic, "due", 3, 0)
		start := time.Now()
		publishDelayed(t, pub, topic, "later", 4, time.Hour)

		require.Eventually(t, func() bool { return statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters == 2 }, 5*time.Second, 5*time.Millisecond)
		s := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, int64(4), s.Scheduled)
		assert.Equal(t, int64(3), s.Due)
		assert.Equal(t, int64(1), s.InFlight)
		assert.True(t, s.Paused)
		assert.Positive(t, s.OldestDueAge)
		assert.WithinDuration(t, start.Add(time.Hour), s.NextDue, time.Second)
		held.Ack()
	})
}

func TestPausedGroupClaimsNothingAndResumeWakesIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		// The subscription's client notes the Redis time of the last claim Redis answered.
		var lastClaimUs atomic.Int64
		client := faultyClient(t, b, scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			if reply, _ := cmd.(*redis.Cmd).Val().([]any); err == nil && len(reply) > 0 {
				if us, ok := reply[0].(int64); ok { // claim.lua's first value: the Redis time
					lastClaimUs.Store(us) // one partition: its claims run one after another
				}
			}
			return err
		}})
		ch := subscribe(t, newSubscriber(t, backend{name: b.name, client: client}, nil), topic)
		publishDelayed(t, pub, topic, "before", 1, 0)
		receive(t, ch, 5*time.Second).Ack()

		require.NoError(t, in.Pause(context.Background(), topic, redisdelay.DefaultConsumerGroup))
		require.NoError(t, in.Pause(context.Background(), topic, redisdelay.DefaultConsumerGroup), "pausing twice is fine")
		// Publishers keep publishing while the group is paused: nothing is delivered, nothing
		// lost. The publish wakes the subscription, which claims: once a claim that ran after the
		// publish (by the Redis clock) was answered, the subscription has asked Redis with every
		// message due, and Redis handed out none.
		const n = 50
		publishDelayed(t, pub, topic, "m", n, 0)
		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDue, Limit: 1})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1)
		publishedUs := page.Messages[0].DueAt.UnixMicro() // due at once: when the publish ran
		require.Eventually(t, func() bool { return lastClaimUs.Load() > publishedUs }, 5*time.Second, 5*time.Millisecond, "the subscription did not claim after the publish")
		s := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, [2]int64{n, 0}, [2]int64{s.Due, s.InFlight}, "due, in flight")

		resumed := time.Now()
		require.NoError(t, in.Resume(context.Background(), topic, redisdelay.DefaultConsumerGroup))
		first := receive(t, ch, 5*time.Second)
		t.Logf("first delivery %s after Resume", time.Since(resumed))
		assert.Less(t, time.Since(resumed), time.Second, "Resume wakes the subscription instead of waiting for its recheck")
		seen := map[string]bool{first.UUID: true}
		first.Ack()
		for len(seen) < n {
			msg := receive(t, ch, 5*time.Second)
			seen[msg.UUID] = true
			msg.Ack()
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
	})
}

func TestRemovedGroupGetsNothingMoreAndPublishesNeverResurrectIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		// No new-group window, which would keep the messages for groups registering later.
		noWindow := func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup, c.NewGroupWindow = "stays", -1 }
		require.NoError(t, newSubscriber(t, b, noWindow).SubscribeInitialize(topic))
		// The removed group has a live subscriber, which acks whatever it gets.
		goes := subscribe(t, newSubscriber(t, b, inGroup("goes")), topic)
		var afterRemoval atomic.Int64
		var removed atomic.Bool
		go func() {
			for msg := range goes {
				if removed.Load() && strings.HasPrefix(msg.UUID, "after") {
					afterRemoval.Add(1)
				}
				msg.Ack()
			}
		}()
		publishDelayed(t, pub, topic, "before", 100, time.Hour)

		// A publisher whose cached view still names the removed group keeps publishing.
		var published atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if assert.NoError(t, pub.Publish(topic, message.NewMessage("during"+strconv.Itoa(i), nil))) {
					published.Add(1)
				}
			}
		}()
		stopPublishing := sync.OnceFunc(func() { close(stop); <-done })
		t.Cleanup(stopPublishing)
		dropped, err := in.RemoveGroup(context.Background(), topic, "goes")
		require.NoError(t, err)
		assert.GreaterOrEqual(t, dropped, int64(100))
		for published.Load() < 20 {
			runtime.Gosched()
		}
		stopPublishing()
		removed.Store(true)
		publishDelayed(t, pub, topic, "after", 20, 0)

		due, lease := redisdelay.GroupKeysForTest("", topic, "goes")
		n, err := b.client.Exists(context.Background(), due, lease).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the removed group's keys are gone and no publish brought them back")
		topics, err := in.Topics(context.Background())
		require.NoError(t, err)
		for _, ti := range topics {
			if ti.Topic == topic {
				assert.Equal(t, []string{"stays"}, ti.Groups)
			}
		}

		// The group that stays receives everything, and once it has acked all, nothing is left.
		ch := subscribe(t, newSubscriber(t, b, inGroup("stays")), topic)
		total := 100 + int(published.Load()) + 20
		// The "before" messages are due in an hour: run them now.
		for {
			page, err := in.List(context.Background(), topic, "stays", redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 1000})
			require.NoError(t, err)
			if len(page.Messages) == 0 {
				break
			}
			for _, m := range page.Messages {
				_, _, err := in.RunNowRef(context.Background(), topic, "stays", m.Ref)
				require.NoError(t, err)
			}
		}
		for range total {
			receive(t, ch, 5*time.Second).Ack()
		}
		assert.Zero(t, afterRemoval.Load(), "nothing published after the removal reaches the removed group")
		require.Eventually(t, func() bool {
			return b.client.HLen(context.Background(), redisdelay.MessagesKeyForTest("", topic)).Val() == 0
		}, 5*time.Second, 10*time.Millisecond, "no stored message waits for the removed group")

		_, err = in.RemoveGroup(context.Background(), topic, "goes")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

func TestListPagesAndShowsMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		publishDelayed(t, pub, topic, "m", 250, time.Hour)
		require.NoError(t, pub.Publish(topic, keyed("order-7", 2*time.Hour, "keyed payload")))

		seen := map[string]bool{}
		var last time.Time
		opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 100}
		pages := 0
		for {
			page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, opts)
			require.NoError(t, err)
			pages++
			for _, m := range page.Messages {
				assert.False(t, seen[m.UUID], "%s listed twice", m.UUID)
				seen[m.UUID] = true
				assert.False(t, m.DueAt.Before(last), "due-time order")
				last = m.DueAt
				if m.Key == "" {
					assert.Equal(t, len("payload of ")+len(m.UUID), m.PayloadSize)
				}
			}
			if page.NextCursor == "" {
				break
			}
			opts.Cursor = page.NextCursor
		}
		assert.Len(t, seen, 251)
		assert.Equal(t, 3, pages)

		due, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
		require.NoError(t, err)
		assert.Empty(t, due.Messages)

		first, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 1})
		require.NoError(t, err)
		require.Len(t, first.Messages, 1)
		m, err := in.Message(context.Background(), topic, redisdelay.DefaultConsumerGroup, first.Messages[0].Ref)
		require.NoError(t, err)
		assert.Equal(t, first.Messages[0].UUID, m.UUID)
		assert.Equal(t, "payload of "+m.UUID, string(m.Payload))

		k, err := in.MessageByKey(context.Background(), topic, redisdelay.DefaultConsumerGroup, "order-7")
		require.NoError(t, err)
		assert.Equal(t, "keyed payload", string(k.Payload))
		assert.Equal(t, "order-7", k.Key)
		assert.Equal(t, "keyed payload", k.Preview)

		_, err = in.Message(context.Background(), topic, redisdelay.DefaultConsumerGroup, "0/"+base64.RawURLEncoding.EncodeToString([]byte("000000ffffff")))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		_, err = in.List(context.Background(), topic, "nobody", opts)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

func TestRequeueBringsDeadLettersBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 1 })
		ch := subscribe(t, sub, topic)
		publishDelayed(t, pub, topic, "m", 10, 0)
		for range 10 {
			receive(t, ch, 5*time.Second).Nack()
		}
		var dead redisdelay.ListPage
		require.Eventually(t, func() bool {
			var err error
			dead, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
			require.NoError(t, err)
			return len(dead.Messages) == 10
		}, 5*time.Second, 10*time.Millisecond)
		assert.Equal(t, redisdelay.DeadLetterReasonNacked, dead.Messages[0].Metadata[redisdelay.DeadLetterReasonMetadataKey])

		n, err := in.Requeue(context.Background(), topic, redisdelay.DefaultConsumerGroup, dead.Messages[0].Ref)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, dead.Messages[0].UUID, msg.UUID)
		assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Ack()

		n, err = in.Requeue(context.Background(), topic, redisdelay.DefaultConsumerGroup)
		require.NoError(t, err)
		assert.Equal(t, int64(9), n)
		seen := map[string]bool{}
		for range 9 {
			msg := receive(t, ch, 5*time.Second)
			seen[msg.UUID] = true
			msg.Ack()
		}
		assert.Len(t, seen, 9)
		assert.NotContains(t, seen, dead.Messages[0].UUID)
		assert.Zero(t, statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters)
	})
}

// A dead letter, listed or read by its ref, says how many attempts it had, why the last one
// failed, when it died (the Redis time it was moved) and the key it had, and carries its whole
// payload.
func TestDeadLettersSayTheirAttemptsReasonAndTimeOfDeath(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 2 }), topic)
		before := time.Now()
		require.NoError(t, pub.Publish(topic, redisdelay.WithKey(message.NewMessage("m0", []byte("payload of m0")), "order-7")))
		receive(t, ch, 5*time.Second).Nack()
		receive(t, ch, 5*time.Second).Nack()
		var dead redisdelay.ListPage
		require.Eventually(t, func() bool {
			var err error
			dead, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
			require.NoError(t, err)
			return len(dead.Messages) == 1
		}, 5*time.Second, 10*time.Millisecond)
		after := time.Now()

		listed := dead.Messages[0]
		one, err := in.DeadLetter(context.Background(), topic, redisdelay.DefaultConsumerGroup, listed.Ref)
		require.NoError(t, err)
		for _, m := range []redisdelay.MessageInfo{listed, one} {
			assert.Equal(t, redisdelay.StateDeadLettered, m.State)
			assert.Equal(t, 2, m.Attempt, "the attempts it had, not its attempts on the dead-letter topic")
			assert.Equal(t, redisdelay.DeadLetterReasonNacked, m.Reason)
			assert.Equal(t, "order-7", m.Key, "the key it had")
			assert.WithinRange(t, m.DueAt, before.Add(-time.Second), after.Add(time.Second), "died between publish and list (clocks within 1 s)")
		}
		assert.Equal(t, "payload of m0", string(one.Payload))
		assert.Less(t, len(listed.Ref), 40, "a short ref")

		// Stats count them once: as the group's DeadLetters, not as parked on the dead-letter
		// topic, which has no group of its own.
		all, err := in.Stats(context.Background())
		require.NoError(t, err)
		dlt := redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)
		for _, st := range all {
			assert.NotEqual(t, dlt, st.Topic)
		}
		assert.Equal(t, int64(1), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters)
	})
}

// Messages published to a topic with no consumer group are counted and listed under
// ParkedGroup until the first group registers and takes them.
func TestStatsAndListShowTheParkedMessagesOfATopicWithNoGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		publishDelayed(t, pub, topic, "now", 2, 0)
		publishDelayed(t, pub, topic, "later", 3, time.Hour)

		all, err := in.Stats(context.Background(), topic)
		require.NoError(t, err)
		require.Len(t, all, 1)
		st := all[0]
		assert.Equal(t, redisdelay.ParkedGroup, st.Group)
		assert.Equal(t, [4]int64{2, 3, 0, 0}, [4]int64{st.Due, st.Scheduled, st.InFlight, st.DeadLetters})
		assert.Positive(t, st.OldestDueAge)
		assert.WithinDuration(t, time.Now().Add(time.Hour), st.NextDue, time.Minute)
		assert.False(t, st.Paused)
		everything, err := in.Stats(context.Background())
		require.NoError(t, err)
		found := false
		for _, e := range everything {
			found = found || e.Topic == topic && e.Group == redisdelay.ParkedGroup && e.Due == 2 && e.Scheduled == 3
		}
		assert.True(t, found, "Stats of every topic has it too")

		due, err := in.List(context.Background(), topic, redisdelay.ParkedGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
		require.NoError(t, err)
		require.Len(t, due.Messages, 2)
		assert.Equal(t, "now0", due.Messages[0].UUID)
		later, err := in.List(context.Background(), topic, redisdelay.ParkedGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		assert.Len(t, later.Messages, 3)
		one, err := in.Message(context.Background(), topic, redisdelay.ParkedGroup, later.Messages[2].Ref)
		require.NoError(t, err)
		assert.Equal(t, "payload of later2", string(one.Payload))
		_, err = in.List(context.Background(), topic, redisdelay.ParkedGroup, redisdelay.ListOptions{State: redisdelay.StateInFlight})
		assert.ErrorContains(t, err, "parked messages")

		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		st = statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, [2]int64{2, 3}, [2]int64{st.Due, st.Scheduled}, "the first group took them")
		all, err = in.Stats(context.Background(), topic)
		require.NoError(t, err)
		assert.Len(t, all, 1, "no parked row beside the group")
		_, err = in.List(context.Background(), topic, redisdelay.ParkedGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

func TestPurgeDropsOneStateOfOneGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		for _, g := range []string{"a", "b"} {
			require.NoError(t, newSubscriber(t, b, inGroup(g)).SubscribeInitialize(topic))
		}
		publishDelayed(t, pub, topic, "due", 3, 0)
		publishDelayed(t, pub, topic, "later", 5, time.Hour)
		n, err := in.Purge(context.Background(), topic, "a", redisdelay.StateDue)
		require.NoError(t, err)
		assert.Equal(t, int64(3), n)
		a, bb := statsOf(t, in, topic, "a"), statsOf(t, in, topic, "b")
		assert.Equal(t, [2]int64{0, 5}, [2]int64{a.Due, a.Scheduled})
		assert.Equal(t, [2]int64{3, 5}, [2]int64{bb.Due, bb.Scheduled}, "the other group keeps its messages")
		ch := subscribe(t, newSubscriber(t, b, inGroup("b")), topic)
		for range 3 {
			receive(t, ch, 5*time.Second).Ack()
		}
	})
}

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

		o, err := in.CancelRef(context.Background(), topic, redisdelay.DefaultConsumerGroup, refs["m0"])
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		o, err = in.CancelRef(context.Background(), topic, redisdelay.DefaultConsumerGroup, refs["m0"])
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeNotFound, o, "cancelled already")

		o, due, err := in.RescheduleRef(context.Background(), topic, redisdelay.DefaultConsumerGroup, refs["m2"], time.Now().Add(300*time.Millisecond))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, o)
		o, _, err = in.RunNowRef(context.Background(), topic, redisdelay.DefaultConsumerGroup, refs["m1"])
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
		_, err = in.CancelRef(context.Background(), topic, redisdelay.DefaultConsumerGroup, "not-a-ref")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	})
}

// The lease set's marker keeps it in the skiplist encoding even with a few leases, where Redis
// would otherwise use a listpack, and no reader counts the marker as a lease.
func TestLeaseSetKeepsTheSkiplistEncodingAndTheMarkerIsNoLease(t *testing.T) {
	b := realRedis(t)
	topic := "orders"
	pub := newPublisher(t, b)
	sub := newSubscriber(t, b, nil)
	ch := subscribe(t, sub, topic)
	require.NoError(t, pub.Publish(topic, message.NewMessage("a", nil), message.NewMessage("b", nil)))
	got := receive(t, ch, 2*time.Second)

	ctx := context.Background()
	_, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
	assert.Equal(t, "skiplist", b.client.ObjectEncoding(ctx, lease).Val())
	in := newInspector(t, b, 1)
	stats, err := in.Stats(ctx, topic)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	assert.GreaterOrEqual(t, stats[0].InFlight, int64(1))
	assert.Equal(t, b.client.ZCard(ctx, lease).Val()-1, stats[0].InFlight, "every member but the marker is a lease")
	got.Ack()
	receive(t, ch, 2*time.Second).Ack()
	require.Eventually(t, func() bool {
		s, err := in.Stats(ctx, topic)
		return err == nil && len(s) == 1 && s[0].InFlight == 0
	}, 5*time.Second, 10*time.Millisecond, "the marker is not counted as in flight")
}

// TestTheLeaseSetMarkerHasNoRef: the lease set's marker member (see internal/store/scripts.go)
// is not a message: a ref crafted from it names nothing.
func TestTheLeaseSetMarkerHasNoRef(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		publishDelayed(t, pub, topic, "held", 1, 0)
		msg := receive(t, ch, 5*time.Second) // in flight: the lease set and its marker exist
		_, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
		marker, err := b.client.ZRangeByScore(context.Background(), lease, &redis.ZRangeBy{Min: "(1e300", Max: "+inf"}).Result()
		require.NoError(t, err)
		require.Len(t, marker, 1)
		ref := "0/" + base64.RawURLEncoding.EncodeToString([]byte(marker[0]))
		_, err = in.Message(context.Background(), topic, redisdelay.DefaultConsumerGroup, ref)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		msg.Ack()
	})
}
