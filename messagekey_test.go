package redisdelay_test

import (
	"context"
	"errors"
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

// keyed returns a message with key, due after d.
func keyed(key string, d time.Duration, payload string) *message.Message {
	msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), []byte(payload)), key)
	if d > 0 {
		delay.Message(msg, delay.For(d))
	}
	return msg
}

func publisherWith(t *testing.T, b backend, edit func(*redisdelay.PublisherConfig)) *redisdelay.Publisher {
	cfg := redisdelay.PublisherConfig{Client: b.client}
	edit(&cfg)
	pub, err := redisdelay.NewPublisher(cfg, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// publishOne publishes msg and returns its outcome.
func publishOne(t *testing.T, pub *redisdelay.Publisher, topic string, msg *message.Message) redisdelay.Outcome {
	t.Helper()
	outcomes, err := pub.PublishWithResult(topic, msg)
	require.NoError(t, err)
	require.Len(t, outcomes, 1)
	return outcomes[0]
}

func inGroup(name string) func(*redisdelay.SubscriberConfig) {
	return func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = name }
}

// inGroupWithoutWindow is inGroup with the new-group window off: for tests of the rule that a
// group receives only what is published after it registered.
func inGroupWithoutWindow(name string) func(*redisdelay.SubscriberConfig) {
	return func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup, c.NewGroupWindow = name, -1 }
}

func TestCancelledMessageReachesNoGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		chA := subscribe(t, newSubscriber(t, b, inGroup("a")), topic)
		chB := subscribe(t, newSubscriber(t, b, inGroup("b")), topic)

		require.NoError(t, pub.Publish(topic, keyed("order-42", 300*time.Millisecond, "check")))
		// A later message without a key shows when the cancelled one would have been long due.
		after := message.NewMessage("after", nil)
		delay.Message(after, delay.For(600*time.Millisecond))
		require.NoError(t, pub.Publish(topic, after))

		res, err := in.Cancel(context.Background(), topic, redisdelay.ByKey("order-42"))
		require.NoError(t, err)
		assert.Equal(t, map[string]redisdelay.Outcome{"a": redisdelay.OutcomeApplied, "b": redisdelay.OutcomeApplied}, res.Groups)
		assert.True(t, res.Found())

		for _, ch := range []<-chan *message.Message{chA, chB} {
			msg := receive(t, ch, 5*time.Second)
			assert.Equal(t, "after", msg.UUID, "the cancelled message must never be delivered")
			msg.Ack()
		}

		again, err := in.Cancel(context.Background(), topic, redisdelay.ByKey("order-42"))
		require.NoError(t, err)
		assert.False(t, again.Found(), "the message is gone: %v", again.Groups)
		assert.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("order-42", time.Hour, "")), "the key is free again")
	})
}

func TestCancelRacingClaimsDeliversAtMostOnceAndNeverAfterRemoval(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		// No new-group window: it would keep each acked message, so that a cancel would find it
		// finished rather than gone.
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ClaimBatchSize, c.NewGroupWindow = 1, -1 }), topic)

		const n = 200
		const spacing = 3 * time.Millisecond
		var msgs []*message.Message
		for i := range n {
			// Due one every 3 ms over the next 600 ms, so cancels and claims meet.
			msgs = append(msgs, keyed("k"+strconv.Itoa(i), time.Duration(i)*spacing, ""))
		}
		published := time.Now()
		require.NoError(t, pub.Publish(topic, msgs...))

		var mu sync.Mutex
		received := map[string]int{}
		total := 0
		stop := make(chan struct{})
		consumed := make(chan struct{})
		go func() {
			defer close(consumed)
			for {
				select {
				case msg, ok := <-ch:
					if !ok {
						return // the test ended early; its failure says why
					}
					mu.Lock()
					received[msg.Metadata.Get(redisdelay.KeyMetadataKey)]++
					total++
					mu.Unlock()
					msg.Ack()
				case <-stop:
					return
				}
			}
		}()

		// Four cancellers take the keys in due order, racing the subscriber's claims.
		outcomes := make([]redisdelay.Outcome, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					res, err := in.Cancel(context.Background(), topic, redisdelay.ByKey("k"+strconv.Itoa(i)))
					if !assert.NoError(t, err) {
						return
					}
					outcomes[i] = res.Groups[redisdelay.DefaultConsumerGroup]
				}
			}()
		}
		wg.Wait()
		expected := 0
		for _, o := range outcomes {
			if o == redisdelay.OutcomeNotFound {
				expected++
			}
		}
		// Every message that was acked before its cancel arrived; one cancelled in flight may
		// (if its handler had it, or before its subscription learned of the lost lease); then,
		// once the last due time is well past, nothing more does.
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return total >= expected
		}, 10*time.Second, 5*time.Millisecond, "%d of %d arrived; outcomes %v, received %v", &total, expected, outcomes, received)
		<-time.After(time.Until(published.Add(n*spacing + 300*time.Millisecond)))
		close(stop)
		<-consumed

		mu.Lock()
		defer mu.Unlock()
		counts := map[redisdelay.Outcome]int{}
		for i, o := range outcomes {
			key := "k" + strconv.Itoa(i)
			counts[o]++
			assert.LessOrEqual(t, received[key], 1, "key %s delivered more than once", key)
			switch o {
			case redisdelay.OutcomeApplied:
				assert.Zero(t, received[key], "key %s was delivered although Cancel removed it while due", key)
			case redisdelay.OutcomeNotFound:
				// Already acked (and, with no history kept, gone).
				assert.Equal(t, 1, received[key], "key %s was acked before the cancel, so it was delivered once", key)
			case redisdelay.OutcomeInFlight:
				// Claimed before the cancel: at most once (checked above).
			default:
				t.Errorf("key %s: unexpected outcome %s", key, o)
			}
		}
		t.Logf("cancel outcomes: %v", counts)
		assert.GreaterOrEqual(t, total, counts[redisdelay.OutcomeNotFound], "the messages acked before their cancel were delivered")
		assert.LessOrEqual(t, total, n-counts[redisdelay.OutcomeApplied], "no message removed while due was delivered")
		assert.Positive(t, counts[redisdelay.OutcomeApplied], "some cancels must have come before the claim")
	})
}

func TestRescheduleIsNeverEarlyAgainstTheNewDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, nil), topic)

		// Earlier: from an hour to 300 ms.
		require.NoError(t, pub.Publish(topic, keyed("earlier", time.Hour, "")))
		res, err := in.RescheduleAfter(context.Background(), topic, redisdelay.ByKey("earlier"), 300*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup])
		msg := receive(t, ch, 5*time.Second)
		arrived := time.Now()
		assert.Equal(t, "earlier", msg.Metadata.Get(redisdelay.KeyMetadataKey))
		assert.False(t, arrived.Before(res.DueAt), "arrived %s before the new due time %s", arrived, res.DueAt)
		assert.Equal(t, res.DueAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
		msg.Ack()

		// Later: from 200 ms to 800 ms.
		require.NoError(t, pub.Publish(topic, keyed("later", 200*time.Millisecond, "")))
		res, err = in.Reschedule(context.Background(), topic, redisdelay.ByKey("later"), time.Now().Add(800*time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup])
		msg = receive(t, ch, 5*time.Second)
		assert.False(t, time.Now().Before(res.DueAt), "arrived before the new due time %s", res.DueAt)
		assert.Equal(t, "later", msg.Metadata.Get(redisdelay.KeyMetadataKey))
		msg.Ack()

		// Run now.
		require.NoError(t, pub.Publish(topic, keyed("now", time.Hour, "")))
		start := time.Now()
		res, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("now"))
		require.NoError(t, err)
		require.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup])
		msg = receive(t, ch, 5*time.Second)
		assert.Equal(t, "now", msg.Metadata.Get(redisdelay.KeyMetadataKey))
		assert.Less(t, time.Since(start), time.Second, "RunNow wakes the subscriber")
		// In flight now: rescheduling leaves it alone.
		res, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("now"))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeInFlight, res.Groups[redisdelay.DefaultConsumerGroup])
		msg.Ack()

		res, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("never-published"))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeNotFound, res.Groups[redisdelay.DefaultConsumerGroup])
	})
}

func TestDuplicatePolicies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			policy   redisdelay.DuplicatePolicy
			second   time.Duration // due time of the second message, the first is due in 1 min
			outcome  redisdelay.Outcome
			keepsNew bool
		}{
			{redisdelay.KeepExisting, 2 * time.Minute, redisdelay.OutcomeDuplicate, false},
			{redisdelay.ReplaceExisting, 2 * time.Minute, redisdelay.OutcomeReplaced, true},
			{redisdelay.ReplaceExisting, 30 * time.Second, redisdelay.OutcomeReplaced, true},
			{redisdelay.KeepEarlier, 30 * time.Second, redisdelay.OutcomeReplaced, true},
			{redisdelay.KeepEarlier, 2 * time.Minute, redisdelay.OutcomeDuplicate, false},
			{redisdelay.KeepLater, 2 * time.Minute, redisdelay.OutcomeReplaced, true},
			{redisdelay.KeepLater, 30 * time.Second, redisdelay.OutcomeDuplicate, false},
		} {
			name := string(tc.policy) + "/" + tc.second.String()
			t.Run(name, func(t *testing.T) {
				topic := newTopic()
				pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.OnDuplicate = tc.policy })
				in := newInspector(t, b, 1)
				sub := newSubscriber(t, b, nil)
				require.NoError(t, sub.SubscribeInitialize(topic))

				require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("k", time.Minute, "first")))
				before, err := in.Status(context.Background(), topic, redisdelay.ByKey("k"))
				require.NoError(t, err)
				require.Equal(t, redisdelay.StateScheduled, before.Groups[redisdelay.DefaultConsumerGroup].State)
				start := time.Now()
				require.Equal(t, tc.outcome, publishOne(t, pub, topic, keyed("k", tc.second, "second")))
				after, err := in.Status(context.Background(), topic, redisdelay.ByKey("k"))
				require.NoError(t, err)
				due := after.Groups[redisdelay.DefaultConsumerGroup].DueAt
				if tc.keepsNew {
					assert.WithinDuration(t, start.Add(tc.second), due, time.Second, "the new due time")
				} else {
					assert.Equal(t, before.Groups[redisdelay.DefaultConsumerGroup].DueAt, due, "the existing due time")
				}
				// Which payload is stored shows on delivery.
				_, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("k"))
				require.NoError(t, err)
				msg := receive(t, subscribe(t, sub, topic), 5*time.Second)
				want := "first"
				if tc.keepsNew {
					want = "second"
				}
				assert.Equal(t, want, string(msg.Payload))
				msg.Ack()
			})
		}
		t.Run("per-message override and duplicates within one call", func(t *testing.T) {
			topic := newTopic()
			pub := newPublisher(t, b)
			replace := keyed("k", time.Minute, "third")
			replace.Metadata.Set(redisdelay.OnDuplicateMetadataKey, string(redisdelay.ReplaceExisting))
			outcomes, err := pub.PublishWithResult(topic, keyed("k", time.Minute, "first"), keyed("k", time.Minute, "second"), replace, keyed("other", time.Minute, ""))
			require.NoError(t, err)
			assert.Equal(t, []redisdelay.Outcome{redisdelay.OutcomeScheduled, redisdelay.OutcomeDuplicate, redisdelay.OutcomeReplaced, redisdelay.OutcomeScheduled}, outcomes)
			in := newInspector(t, b, 1)
			_, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("k"))
			require.NoError(t, err)
			ch := subscribe(t, newSubscriber(t, b, nil), topic) // takes over the parked messages
			msg := receive(t, ch, 5*time.Second)
			assert.Equal(t, "third", string(msg.Payload))
			msg.Ack()
			// Nothing else of key k is held: only the other key's message, due in a minute.
			st := waitStats(t, in, topic, redisdelay.DefaultConsumerGroup, "holding nothing due or in flight", func(s redisdelay.GroupStats) bool { return s.Due+s.InFlight == 0 })
			assert.Equal(t, int64(1), st.Scheduled)
			other, err := in.Status(context.Background(), topic, redisdelay.ByKey("other"))
			require.NoError(t, err)
			assert.Equal(t, redisdelay.StateScheduled, other.Groups[redisdelay.DefaultConsumerGroup].State)
		})
	})
}

func TestKeyIsFreeOnceDoneOrOnceItsRetentionEnds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, retention := range []time.Duration{0, 300 * time.Millisecond} {
			t.Run(retention.String(), func(t *testing.T) {
				topic := newTopic()
				pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyRetention = retention })
				// No new-group window, which keeps the key taken while it keeps the message.
				ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.NewGroupWindow = -1 }), topic)
				require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("k", 0, "1")))
				msg := receive(t, ch, 5*time.Second)
				require.Equal(t, redisdelay.OutcomeDuplicate, publishOne(t, pub, topic, keyed("k", 0, "2")), "in flight: the key is taken")
				msg.Ack()
				if retention > 0 && b.miniredis != nil {
					// miniredis lets keys expire only when told that time passed.
					defer b.miniredis.FastForward(retention)
				}
				if retention > 0 {
					// The ack is confirmed asynchronously; the history then keeps the key.
					require.Eventually(t, func() bool {
						st, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client}, nil)
						require.NoError(t, err)
						s, err := st.Status(context.Background(), topic, redisdelay.ByKey("k"))
						require.NoError(t, err)
						return s.Groups[redisdelay.DefaultConsumerGroup].State == redisdelay.StateAcked
					}, 5*time.Second, 5*time.Millisecond)
					require.Equal(t, redisdelay.OutcomeDuplicate, publishOne(t, pub, topic, keyed("k", 0, "3")), "retained: the key is taken")
				}
				start := time.Now()
				require.Eventually(t, func() bool {
					if b.miniredis != nil {
						b.miniredis.FastForward(10 * time.Millisecond)
					}
					return publishOne(t, pub, topic, keyed("k", 0, "4")) == redisdelay.OutcomeScheduled
				}, 5*time.Second, 10*time.Millisecond, "the key must be free again")
				if retention > 0 && b.miniredis == nil {
					assert.GreaterOrEqual(t, time.Since(start), retention/2, "the key is taken for about the retention")
				}
				msg = receive(t, ch, 5*time.Second)
				assert.Equal(t, "4", string(msg.Payload))
				msg.Ack()
			})
		}
	})
}

func TestStatusThroughEveryState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyRetention = time.Minute })
		in := newInspector(t, b, 1)
		status := func(key string) redisdelay.KeyGroupStatus {
			t.Helper()
			s, err := in.Status(context.Background(), topic, redisdelay.ByKey(key))
			require.NoError(t, err)
			return s.Groups[redisdelay.DefaultConsumerGroup]
		}
		none, err := in.Status(context.Background(), topic, redisdelay.ByKey("k"))
		require.NoError(t, err)
		assert.False(t, none.Live)
		assert.Empty(t, none.Groups, "no group yet, nothing published")

		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.NackBackoff = redisdelay.ConstantBackoff(time.Hour)
			c.MaxAttempts = 3
		})
		require.NoError(t, sub.SubscribeInitialize(topic))
		published := time.Now()
		require.NoError(t, pub.Publish(topic, keyed("k", 200*time.Millisecond, "")))
		s := status("k")
		assert.Equal(t, redisdelay.StateScheduled, s.State)
		assert.Equal(t, 0, s.Attempt)
		assert.WithinDuration(t, published.Add(200*time.Millisecond), s.DueAt, 100*time.Millisecond)

		ch := subscribe(t, sub, topic)
		msg := receive(t, ch, 5*time.Second)
		s = status("k")
		assert.Equal(t, redisdelay.StateInFlight, s.State)
		assert.Equal(t, 1, s.Attempt)
		assert.True(t, s.LeaseDeadline.After(time.Now()), "lease deadline %s is ahead", s.LeaseDeadline)

		msg.Nack()
		require.Eventually(t, func() bool { return status("k").State == redisdelay.StateScheduled }, 5*time.Second, 5*time.Millisecond)
		s = status("k")
		assert.Equal(t, 1, s.Attempt, "waiting for the retry after one attempt")
		assert.WithinDuration(t, time.Now().Add(time.Hour), s.DueAt, time.Minute)

		_, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("k"))
		require.NoError(t, err)
		msg = receive(t, ch, 5*time.Second)
		assert.Equal(t, "2", msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Ack()
		require.Eventually(t, func() bool { return status("k").State == redisdelay.StateAcked }, 5*time.Second, 5*time.Millisecond)
		s = status("k")
		assert.Equal(t, 2, s.Attempt)
		assert.WithinDuration(t, time.Now(), s.FinishedAt, 5*time.Second)

		// Dead-lettered: nacked on its last attempt.
		require.NoError(t, pub.Publish(topic, keyed("dl", 0, "")))
		for attempt := 1; attempt <= 3; attempt++ {
			msg = receive(t, ch, 5*time.Second)
			assert.Equal(t, strconv.Itoa(attempt), msg.Metadata.Get(redisdelay.AttemptMetadataKey))
			msg.Nack()
			if attempt < 3 {
				require.Eventually(t, func() bool { return status("dl").State == redisdelay.StateScheduled }, 5*time.Second, 5*time.Millisecond)
				_, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("dl"))
				require.NoError(t, err)
			}
		}
		require.Eventually(t, func() bool { return status("dl").State == redisdelay.StateDeadLettered }, 5*time.Second, 5*time.Millisecond)
		s = status("dl")
		assert.Equal(t, 3, s.Attempt)
		assert.Equal(t, redisdelay.DeadLetterReasonNacked, s.Reason)
		letter := receive(t, subscribe(t, newSubscriber(t, b, nil), redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)), 5*time.Second)
		assert.Equal(t, "dl", letter.Metadata.Get(redisdelay.KeyMetadataKey), "a dead letter carries its key")
		letter.Ack()

		// Cancelled while scheduled.
		require.NoError(t, pub.Publish(topic, keyed("c", time.Hour, "")))
		_, err = in.Cancel(context.Background(), topic, redisdelay.ByKey("c"))
		require.NoError(t, err)
		s = status("c")
		assert.Equal(t, redisdelay.StateCancelled, s.State)
		assert.Equal(t, 0, s.Attempt)
		// Done everywhere, history kept: the key reports finished, not unknown.
		for _, op := range []func(context.Context, string, redisdelay.Target) (redisdelay.ActionResult, error){in.Cancel, in.RunNow} {
			res, err := op(context.Background(), topic, redisdelay.ByKey("c"))
			require.NoError(t, err)
			assert.Equal(t, redisdelay.OutcomeFinished, res.Groups[redisdelay.DefaultConsumerGroup])
		}
	})
}

func TestKeysOnAPartitionedTopic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const partitions = 4
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions = partitions })
		in := newInspector(t, b, partitions)
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = partitions }), topic)
		var msgs []*message.Message
		for i := range 20 {
			msgs = append(msgs, keyed("k"+strconv.Itoa(i), time.Hour, ""))
		}
		require.NoError(t, pub.Publish(topic, msgs...))
		want := map[string]bool{}
		for i := range 20 {
			key := "k" + strconv.Itoa(i)
			var res redisdelay.ActionResult
			var err error
			if i%2 == 0 {
				res, err = in.Cancel(context.Background(), topic, redisdelay.ByKey(key))
			} else {
				res, err = in.RunNow(context.Background(), topic, redisdelay.ByKey(key))
				want[key] = true
			}
			require.NoError(t, err)
			assert.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup], key)
		}
		got := map[string]bool{}
		for range want {
			msg := receive(t, ch, 5*time.Second)
			got[msg.Metadata.Get(redisdelay.KeyMetadataKey)] = true
			msg.Ack()
		}
		assert.Equal(t, want, got)
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // the cancelled ones are not held
	})
}

func TestBadKeysAreRefusedAndNothingIsStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		for _, tc := range []struct {
			name, key, value string
		}{
			{"empty", redisdelay.KeyMetadataKey, ""},
			{"too long", redisdelay.KeyMetadataKey, strings.Repeat("k", redisdelay.MaxKeyLength+1)},
			{"control character", redisdelay.KeyMetadataKey, "order\n42"},
			{"invalid UTF-8", redisdelay.KeyMetadataKey, "order-\xff"},
			{"unknown policy", redisdelay.OnDuplicateMetadataKey, "keep-newest"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				bad := redisdelay.WithKey(message.NewMessage("bad-"+tc.name, nil), "fine")
				bad.Metadata.Set(tc.key, tc.value)
				good := keyed("good-"+strconv.Itoa(len(tc.name)), 0, "")
				err := pub.Publish(topic, good, bad)
				var me *redisdelay.MessageError
				require.ErrorAs(t, err, &me)
				assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
				assert.Equal(t, topic, me.Topic)
				assert.Equal(t, "bad-"+tc.name, me.UUID)
				assert.Equal(t, tc.key, me.Key)
				assert.Contains(t, err.Error(), me.UUID)
				if tc.key == redisdelay.KeyMetadataKey {
					assert.ErrorIs(t, err, redisdelay.ErrInvalidKey)
					_, opErr := in.Cancel(context.Background(), topic, redisdelay.ByKey(tc.value))
					assert.ErrorIs(t, opErr, redisdelay.ErrInvalidKey)
				}
			})
		}
		assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "nothing of the calls is stored")
		_, err := in.Status(context.Background(), "bad{topic}", redisdelay.ByKey("k"))
		assert.True(t, errors.Is(err, redisdelay.ErrInvalidName), "%v", err)
	})
}

func TestCallsByKeyThatRunTwiceActOnceAndReturnTheFirstResult(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var reruns atomic.Int64
		// What go-redis does when a reply is lost: the same command runs again.
		client := faultyClient(t, b, scriptFault{match: isPublishCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			reruns.Add(1)
			return next(ctx, cmd)
		}})
		topic := newTopic()
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		pub := publisherWith(t, backend{name: b.name, client: client}, func(*redisdelay.PublisherConfig) {})
		in := newInspector(t, backend{name: b.name, client: client}, 1)

		assert.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("a", time.Hour, "")), "a second run must not call the message its own duplicate")
		assert.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("b", time.Hour, "")))
		res, err := in.Cancel(context.Background(), topic, redisdelay.ByKey("a"))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup], "the second run must report the first run's cancel")
		res, err = in.RescheduleAfter(context.Background(), topic, redisdelay.ByKey("b"), 200*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.DefaultConsumerGroup])
		assert.GreaterOrEqual(t, reruns.Load(), int64(4), "the hook must have run every call twice")

		msg := receive(t, subscribe(t, sub, topic), 5*time.Second)
		assert.Equal(t, "b", msg.Metadata.Get(redisdelay.KeyMetadataKey))
		assert.False(t, time.Now().Before(res.DueAt), "due at the first run's time, not later")
		msg.Ack()
	})
}

// TestAGroupHoldingAReplacedMessageInFlightRetriesTheNewPayload: a ReplaceExisting that finds
// the message due in one group and in flight in another replaces it for both, since it is
// stored once per topic: the group that holds it in flight finishes its delivery with the old
// payload and, once nacked, retries the new payload at its own retry time (its nack backoff,
// not the new due time), while the other group receives it at the new due time.
func TestAGroupHoldingAReplacedMessageInFlightRetriesTheNewPayload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const backoff, newDue = 300 * time.Millisecond, 2 * time.Second
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.OnDuplicate = redisdelay.ReplaceExisting })
		chA := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup, c.NewGroupWindow, c.NackBackoff = "a", -1, redisdelay.ConstantBackoff(backoff)
		}), topic)
		subB := newSubscriber(t, b, inGroupWithoutWindow("b"))
		require.NoError(t, subB.SubscribeInitialize(topic))
		require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("k", 0, "v1")))
		inFlight := receive(t, chA, 5*time.Second)
		require.Equal(t, "v1", string(inFlight.Payload))

		replaced := time.Now()
		require.Equal(t, redisdelay.OutcomeReplaced, publishOne(t, pub, topic, keyed("k", newDue, "v2")), "due in b")
		nacked := time.Now()
		inFlight.Nack()
		retry := receive(t, chA, 5*time.Second)
		assert.Equal(t, "v2", string(retry.Payload), "the retry carries the new payload")
		assert.GreaterOrEqual(t, time.Since(nacked), backoff, "not before its retry time")
		assert.Less(t, time.Since(replaced), newDue, "at its own retry time, not the new due time")
		retry.Ack()

		msg := receive(t, subscribe(t, subB, topic), 5*time.Second)
		assert.Equal(t, "v2", string(msg.Payload))
		assert.GreaterOrEqual(t, time.Since(replaced), newDue, "b receives it at the new due time")
		msg.Ack()
	})
}
