package redisdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// keysOfTopic returns the sorted keys of topic (those with its hash tag), scanning every master
// of a cluster. With persistent, keys that expire on their own (call tokens, claim records) are
// left out.
func keysOfTopic(t *testing.T, b backend, topic string, persistent bool) []string {
	t.Helper()
	ctx := context.Background()
	all, err := scanKeys(ctx, b, redisdelay.DefaultKeyPrefix+"{"+topic+"}*")
	require.NoError(t, err)
	var keys []string
	for _, k := range all {
		if persistent {
			ttl, err := b.client.PTTL(ctx, k).Result()
			require.NoError(t, err)
			if ttl != -1 {
				continue
			}
		}
		keys = append(keys, k)
	}
	return keys
}

// item is a batch item whose UUID is its name, so that batches can be checked by their items.
func item(batchKey, name string) *message.Message {
	return redisdelay.WithBatchKey(message.NewMessage(name, []byte("payload of "+name)), batchKey)
}

// itemsOf returns the UUIDs of a batch's items, in order.
func itemsOf(t *testing.T, batch *message.Message) []string {
	t.Helper()
	items, err := redisdelay.UnpackBatch(batch, nil)
	require.NoError(t, err)
	var names []string
	for _, it := range items {
		names = append(names, it.UUID)
	}
	return names
}

// collectItems receives and acks batches of group on topic from ch until it has seen want
// items, and returns how often each item arrived; then it waits until the group holds nothing
// more, so that nothing more arrives.
func collectItems(t *testing.T, in *redisdelay.Inspector, topic, group string, ch <-chan *message.Message, want int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for n := 0; n < want; {
		batch := receive(t, ch, 5*time.Second)
		for _, name := range itemsOf(t, batch) {
			seen[name]++
			n++
		}
		batch.Ack()
	}
	waitDrained(t, in, topic, group)
	return seen
}

func publishScheduled(t *testing.T, pub *redisdelay.Publisher, topic string, msgs ...*message.Message) {
	t.Helper()
	outcomes, err := pub.PublishWithResult(topic, msgs...)
	require.NoError(t, err)
	require.Len(t, outcomes, len(msgs))
	for i, o := range outcomes {
		require.Equal(t, redisdelay.OutcomeScheduled, o, "item %s", msgs[i].UUID)
	}
}

// scheduledRefs returns the refs of group's scheduled messages.
func scheduledRefs(t *testing.T, in *redisdelay.Inspector, topic, group string) []string {
	t.Helper()
	page, err := in.List(context.Background(), topic, group, redisdelay.ListOptions{State: redisdelay.StateScheduled})
	require.NoError(t, err)
	var refs []string
	for _, m := range page.Messages {
		refs = append(refs, m.Ref)
	}
	return refs
}

// A batch is delivered to the groups registered when it opened, whatever releases it: a group
// that registers while the batch is open neither receives it nor takes it from the others. (The
// new-group window is off here: within it, a later group counts as registered from the start;
// see TestBatchReachesAGroupThatRegisteredWithinTheNewGroupWindow.)
func TestBatchFilledAfterANewGroupRegisteredReachesOnlyTheGroupsOfItsOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			trigger string
			cfg     redisdelay.BatchConfig
		}{
			{redisdelay.BatchTriggerSize, redisdelay.BatchConfig{MaxItems: 2, MaxWait: time.Hour}},
			{redisdelay.BatchTriggerTime, redisdelay.BatchConfig{MaxItems: 100, MaxWait: 500 * time.Millisecond}},
			{redisdelay.BatchTriggerFlush, redisdelay.BatchConfig{MaxItems: 100, MaxWait: time.Hour}},
		} {
			t.Run(tc.trigger, func(t *testing.T) {
				topic := newTopic()
				pub := batchingPublisher(t, b, topic, tc.cfg)
				in := newInspector(t, b, 1)
				// early is registered well before the batch, with a message before it, and
				// consumes only once late has had every chance to take the batch.
				earlySub := newSubscriber(t, b, inGroupWithoutWindow("early"))
				require.NoError(t, earlySub.SubscribeInitialize(topic))
				require.NoError(t, pub.Publish(topic, message.NewMessage("warm-up", nil)))

				publishScheduled(t, pub, topic, item("zone", "i1"))
				lateSub := newSubscriber(t, b, inGroupWithoutWindow("late"))
				require.NoError(t, lateSub.SubscribeInitialize(topic))
				late := subscribe(t, lateSub, topic)
				publishScheduled(t, pub, topic, item("zone", "i2"))
				if tc.trigger == redisdelay.BatchTriggerFlush {
					n, err := batchItems(in.RunNow(context.Background(), topic, redisdelay.ByBatchKey("zone")))
					require.NoError(t, err)
					assert.Equal(t, 2, n)
				}
				// Once the batch is due in early (for the time trigger, once MaxWait has passed),
				// late holds nothing: no copy of the batch, due or in flight, so none can reach it.
				waitStats(t, in, topic, "early", "holding the warm-up and the batch due", func(s redisdelay.GroupStats) bool { return s.Due == 2 })
				assert.Equal(t, redisdelay.GroupStats{Topic: topic, Group: "late"}, statsOf(t, in, topic, "late"))

				early := subscribe(t, earlySub, topic)
				warm := receive(t, early, 5*time.Second)
				require.Equal(t, "warm-up", warm.UUID)
				warm.Ack()
				batch := receive(t, early, 5*time.Second)
				assert.Equal(t, tc.trigger, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
				assert.Equal(t, []string{"i1", "i2"}, itemsOf(t, batch))
				batch.Ack()
				waitDrained(t, in, topic, "early")

				// A message published now reaches both; late's first message is this one.
				require.NoError(t, pub.Publish(topic, message.NewMessage("after", nil)))
				for _, ch := range []<-chan *message.Message{early, late} {
					msg := receive(t, ch, 5*time.Second)
					assert.Equal(t, "after", msg.UUID, "late never gets the batch opened before it registered")
					msg.Ack()
				}
				waitDrained(t, in, topic, "early")
				waitDrained(t, in, topic, "late")
			})
		}
	})
}

// An operation by ref on an open batch closes it: later items open a new batch, and every item
// whose publish said Scheduled reaches each group in some batch.
func TestRunNowOnAnOpenBatchClosesIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, op := range []string{"run now", "reschedule earlier", "cancel"} {
			t.Run(op, func(t *testing.T) {
				topic := newTopic()
				pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 100, MaxWait: time.Hour})
				in := newInspector(t, b, 1)
				subA, subB := newSubscriber(t, b, inGroup("a")), newSubscriber(t, b, inGroup("b"))
				require.NoError(t, subA.SubscribeInitialize(topic))
				require.NoError(t, subB.SubscribeInitialize(topic))

				publishScheduled(t, pub, topic, item("dock", "i1"))
				refs := scheduledRefs(t, in, topic, "a")
				require.Len(t, refs, 1, "the open batch")
				ctx := context.Background()
				var o redisdelay.Outcome
				var err error
				switch op {
				case "run now":
					o, _, err = refOutcome(in.RunNow(ctx, topic, redisdelay.ByRef("a", refs[0])))
				case "reschedule earlier":
					o, _, err = refOutcome(in.Reschedule(ctx, topic, redisdelay.ByRef("a", refs[0]), time.Now().Add(200*time.Millisecond)))
				case "cancel":
					o, err = outcome(in.Cancel(ctx, topic, redisdelay.ByRef("a", refs[0])))
				}
				require.NoError(t, err)
				assert.Equal(t, redisdelay.OutcomeApplied, o)
				// No consumer has claimed anything yet: only the operation can have closed it.
				n, err := batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("dock")))
				require.NoError(t, err)
				assert.Zero(t, n, "the batch is no longer open")

				publishScheduled(t, pub, topic, item("dock", "i2"), item("dock", "i3"))
				n, err = batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("dock")))
				require.NoError(t, err)
				assert.Equal(t, 2, n, "the later items opened a batch of their own")

				want := map[string]int{"i1": 1, "i2": 1, "i3": 1}
				if op == "cancel" {
					delete(want, "i1")
				}
				assert.Equal(t, want, collectItems(t, in, topic, "a", subscribe(t, subA, topic), len(want)), "group a")
				// b still holds the first batch, due in an hour.
				for _, ref := range scheduledRefs(t, in, topic, "b") {
					_, _, err := refOutcome(in.RunNow(ctx, topic, redisdelay.ByRef("b", ref)))
					require.NoError(t, err)
				}
				assert.Equal(t, map[string]int{"i1": 1, "i2": 1, "i3": 1}, collectItems(t, in, topic, "b", subscribe(t, subB, topic), 3), "group b")
			})
		}
	})
}

// Once every batch is acked, nothing that held an open batch is left: no batches hash entry,
// no stored batch, no key beyond those there were before.
func TestReleasedBatchesLeaveNoBookkeeping(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		const keys = 500
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 10, MaxWait: 100 * time.Millisecond})
		// Without the new-group window, which keeps messages for a minute (its own cleanup is
		// TestTheWindowLeavesNoKeysBehind's).
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ClaimBatchSize, c.NewGroupWindow = 100, -1 }), topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("warm-up", nil)))
		receive(t, ch, 5*time.Second).Ack()
		// Wait for the warm-up's ack to land: the baseline holds no stored message (read after
		// the check, so that an ack landing in between cannot leave one in it).
		require.Eventually(t, func() bool {
			return b.client.HLen(context.Background(), redisdelay.MessagesKeyForTest("", topic)).Val() == 0
		}, 5*time.Second, 10*time.Millisecond)
		baseline := keysOfTopic(t, b, topic, true)

		var msgs []*message.Message
		for i := range keys {
			msgs = append(msgs, item("key-"+strconv.Itoa(i), watermill.NewShortUUID()))
		}
		publishScheduled(t, pub, topic, msgs...)
		for range keys {
			batch := receive(t, ch, 10*time.Second)
			assert.Equal(t, redisdelay.BatchTriggerTime, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
			batch.Ack()
		}
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
		var now []string
		assert.Eventually(t, func() bool {
			now = keysOfTopic(t, b, topic, true)
			return assert.ObjectsAreEqual(baseline, now)
		}, 5*time.Second, 20*time.Millisecond, "keys of the topic")
		assert.Equal(t, baseline, now, "keys without an expiry, before the batches and after all were acked")
	})
}

// An operation by ref for a group that is not registered is refused, by the script itself too
// (as when the group is removed between the Inspector's check and the script), and writes nothing.
func TestOperationByRefOnAnUnregisteredGroupIsRefusedAndWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, inGroup("stays")).SubscribeInitialize(topic))
		require.NoError(t, newSubscriber(t, b, inGroup("gone")).SubscribeInitialize(topic))
		publishDelayed(t, pub, topic, "m", 1, time.Hour)
		refs := scheduledRefs(t, in, topic, "gone")
		require.Len(t, refs, 1)
		ctx := context.Background()
		_, err := in.RemoveGroup(ctx, topic, "gone")
		require.NoError(t, err)
		before := keysOfTopic(t, b, topic, false)

		_, err = in.Cancel(ctx, topic, redisdelay.ByRef("gone", refs[0]))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		_, _, err = refOutcome(in.RunNow(ctx, topic, redisdelay.ByRef("gone", refs[0])))
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		assert.ErrorContains(t, err, `"gone"`)
		assert.ErrorContains(t, err, topic)
		for _, op := range []string{"cancel", "reschedule"} {
			_, err := redisdelay.RefOpScriptForTest(ctx, in, topic, "gone", refs[0], op)
			assert.ErrorIs(t, err, redisdelay.ErrNotFound, op)
			assert.ErrorContains(t, err, `"gone"`, op)
		}
		assert.Equal(t, before, keysOfTopic(t, b, topic, false), "no key written, not even a call token")
		assert.Len(t, scheduledRefs(t, in, topic, "stays"), 1, "the other group keeps its message")
	})
}

// TestBatchReachesAGroupThatRegisteredWithinTheNewGroupWindow: within the new-group window a
// group registered after a batch opened receives it like every message kept by the window, and
// each group gets it exactly once, with all its items, whichever group acks first.
func TestBatchReachesAGroupThatRegisteredWithinTheNewGroupWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 2, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		early := subscribe(t, newSubscriber(t, b, inGroup("early")), topic)
		publishScheduled(t, pub, topic, item("zone", "i1"))
		late := subscribe(t, newSubscriber(t, b, inGroup("late")), topic)
		publishScheduled(t, pub, topic, item("zone", "i2"))
		for _, ch := range []<-chan *message.Message{late, early} {
			batch := receive(t, ch, 5*time.Second)
			assert.Equal(t, []string{"i1", "i2"}, itemsOf(t, batch))
			batch.Ack()
		}
		waitDrained(t, in, topic, "early")
		waitDrained(t, in, topic, "late")
	})
}
