package redisdelay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// TestSubscriptionOfARemovedGroupStopsWithAnError: RemoveGroup wakes the group's running
// subscriptions, whose next claim is refused, so their channels close; registering the group
// again later does not bring them back to life.
func TestSubscriptionOfARemovedGroupStopsWithAnError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		old := subscribe(t, newSubscriber(t, b, inGroup("g")), topic)
		publishDelayed(t, pub, topic, "before", 1, 0)
		receive(t, old, 5*time.Second).Ack()

		_, err := in.RemoveGroup(context.Background(), topic, "g")
		require.NoError(t, err)
		select {
		case msg, ok := <-old:
			require.False(t, ok, "the removed group's subscription handed out %v", msg)
		case <-time.After(5 * time.Second):
			t.Fatal("the removed group's subscription still runs 5 s after RemoveGroup returned")
		}
		due, lease := redisdelay.GroupKeysForTest("", topic, "g")
		parked, window := redisdelay.WindowKeysForTest("", topic)
		left, err := b.client.Exists(context.Background(), append(redisdelay.GroupLifecycleKeysForTest("", topic, "g"), due, lease, parked, window)...).Result()
		require.NoError(t, err)
		assert.Zero(t, left, "the removal leaves none of the group's keys, nor what the new-group window kept")

		fresh := subscribe(t, newSubscriber(t, b, inGroup("g")), topic)
		publishDelayed(t, pub, topic, "after", 3, 0)
		for range 3 {
			msg := receive(t, fresh, 5*time.Second)
			assert.Contains(t, msg.UUID, "after")
			msg.Ack()
		}
	})
}

// TestSubscribeRacingRemoveGroupReceivesEverythingPublishedAfterIt: a Subscribe whose
// registration lands while RemoveGroup is still dropping the group's old messages ends with
// the group registered, and its subscription receives every message published after Subscribe
// returned; the removal's later steps do not undo the registration.
func TestSubscribeRacingRemoveGroupReceivesEverythingPublishedAfterIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		// A removal of many chunks takes a while on miniredis under -race.
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, OperationTimeout: time.Minute}, errorLogger{})
		require.NoError(t, err)
		pub := newPublisher(t, b)
		overlapped := 0
		for round := 0; round < 3; round++ {
			topic := newTopic()
			require.NoError(t, newSubscriber(t, b, inGroup("g")).SubscribeInitialize(topic))
			// 10 chunks to drop, so the removal takes many script calls.
			for range 10 {
				publishDelayed(t, pub, topic, "old", 1000, time.Hour)
			}
			var removalDone atomic.Bool
			removal := make(chan error, 1)
			go func() {
				_, err := in.RemoveGroup(ctx, topic, "g")
				removalDone.Store(true)
				removal <- err
			}()
			// Subscribe as soon as the group is unregistered, while its messages are dropped.
			deadline := time.Now().Add(10 * time.Second)
			for {
				topics, err := in.Stats(ctx, topic)
				require.NoError(t, err)
				if !slices.ContainsFunc(topics, func(s redisdelay.GroupStats) bool { return s.Group == "g" }) {
					break
				}
				require.True(t, time.Now().Before(deadline), "the removal never unregistered the group")
			}
			ch := subscribe(t, newSubscriber(t, b, inGroup("g")), topic)
			if !removalDone.Load() {
				overlapped++
			}
			require.NoError(t, <-removal)

			publishDelayed(t, pub, topic, "new", 20, 0)
			got := map[string]bool{}
			for len(got) < 20 {
				msg := receive(t, ch, 5*time.Second)
				assert.Contains(t, msg.UUID, "new", "nothing of before the removal")
				got[msg.UUID] = true
				msg.Ack()
			}
			stats, err := in.Stats(ctx, topic)
			require.NoError(t, err)
			require.Len(t, stats, 1, "the group is registered once the removal is over")
		}
		t.Logf("%s: %d of 3 Subscribe calls landed while the removal ran", b.name, overlapped)
		require.Positive(t, overlapped, "no Subscribe raced the removal: the test proved nothing")
	})
}

// TestRemoveGroupDropsWhatRunningSubscriptionsHoldBuffered: a subscription that claimed 100
// messages at once and hands them out one by one hands out none of them once RemoveGroup has
// returned and its wake-up has crossed Pub/Sub: the removal's wake-up makes it check its leases
// at once (it logs the lease of the message in its handler as lost, within 2 s, long before its
// 30 s lease's heartbeat would), which are gone, and its next claim stops it.
func TestRemoveGroupDropsWhatRunningSubscriptionsHoldBuffered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		logger := leaseLostLogger{lost: make(chan string, 128)}
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client: b.client, NackBackoff: redisdelay.ConstantBackoff(0), ConsumerGroup: "g", ClaimBatchSize: 100,
		}, logger)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := subscribe(t, sub, topic)
		// Warm up so that the claim size grows to 100 (it doubles per claim while handlers are
		// fast), then one claim takes them all.
		publishDelayed(t, pub, topic, "warm", 127, 0)
		for range 127 {
			receive(t, ch, 5*time.Second).Ack()
		}
		publishDelayed(t, pub, topic, "held", 100, 0)
		first := receive(t, ch, 5*time.Second)
		_, err = in.RemoveGroup(context.Background(), topic, "g")
		require.NoError(t, err)
		removed := time.Now()
		select {
		case uuid := <-logger.lost:
			require.Equal(t, first.UUID, uuid, "the lease found lost is the handler's")
		case <-time.After(2 * time.Second):
			t.Fatal("the subscription did not check its leases within 2 s of RemoveGroup: no wake-up")
		}
		first.Ack()
		after := 0
		for closed := false; !closed; {
			select {
			case msg, ok := <-ch:
				if closed = !ok; ok {
					after++
					msg.Ack()
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the subscription still runs 5 s after RemoveGroup returned; it handed out %d since", after)
			}
		}
		t.Logf("%s: %d handed out after RemoveGroup returned; the channel closed after %s", b.name, after, time.Since(removed))
		assert.Zero(t, after, "messages handed out after RemoveGroup returned")
	})
}

// leaseLostLogger is errorLogger that also sends, to lost, the message UUID of each "Lease
// lost" log, which a subscription writes when it finds the lease of the message in its handler
// gone.
type leaseLostLogger struct {
	errorLogger
	lost chan string
}

func (l leaseLostLogger) Info(msg string, fields watermill.LogFields) {
	if strings.HasPrefix(msg, "Lease lost") {
		select {
		case l.lost <- fmt.Sprint(fields["message_uuid"]):
		default:
		}
	}
}

func (l leaseLostLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return leaseLostLogger{errorLogger: errorLogger{fields: l.fields.Add(fields)}, lost: l.lost}
}
