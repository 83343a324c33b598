package redisdelay_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// workersOf returns the first page of the worker records under in's key prefix.
func workersOf(t *testing.T, in *redisdelay.Inspector, opts redisdelay.WorkersOptions) []redisdelay.WorkerInfo {
	t.Helper()
	page, err := in.Workers(context.Background(), opts)
	require.NoError(t, err)
	return page.Workers
}

// waitWorkers waits up to timeout until the worker records under in's key prefix satisfy ok,
// and returns them.
func waitWorkers(t *testing.T, in *redisdelay.Inspector, what string, timeout time.Duration, ok func([]redisdelay.WorkerInfo) bool) []redisdelay.WorkerInfo {
	t.Helper()
	var got []redisdelay.WorkerInfo
	deadline := time.Now().Add(timeout)
	for {
		got = workersOf(t, in, redisdelay.WorkersOptions{})
		if ok(got) {
			return got
		}
		require.True(t, time.Now().Before(deadline), "waited %s for %s; workers: %+v", timeout, what, got)
		time.Sleep(10 * time.Millisecond)
	}
}

// workerKeys returns the keys of the worker records under prefix.
func workerKeys(t *testing.T, b backend, prefix string) []string {
	t.Helper()
	keys, err := scanKeys(context.Background(), b, prefix+"{workers}*")
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

func TestARunningSubscriberIsListedWithItsSubscriptionsAndWhatItHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		orders, invoices := newTopic(), newTopic()
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup, c.Consumer, c.WorkerHeartbeat = "billing", "billing-1", 50*time.Millisecond
		})
		require.Empty(t, workersOf(t, in, redisdelay.WorkersOptions{}), "no record before the first Subscribe")
		before := time.Now()
		ch := subscribe(t, sub, orders)
		ctx, cancel := context.WithCancel(context.Background())
		_, err := sub.Subscribe(ctx, invoices)
		require.NoError(t, err)

		host, _ := os.Hostname()
		ws := waitWorkers(t, in, "both subscriptions", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
			return len(ws) == 1 && len(ws[0].Subscriptions) == 2
		})
		w := ws[0]
		assert.Equal(t, redisdelay.WorkerSubscriber, w.Kind)
		assert.Equal(t, "billing-1", w.Consumer)
		assert.Equal(t, host, w.Host)
		assert.Equal(t, os.Getpid(), w.PID)
		assert.True(t, strings.HasPrefix(w.ID, host+":"), "ID %q", w.ID)
		assert.WithinDuration(t, before, w.Started, 2*time.Second)
		assert.Equal(t, redisdelay.DefaultLeaseTimeout, w.LeaseTimeout)
		assert.Equal(t, 150*time.Millisecond, w.Expires.Sub(w.LastBeat), "3 heartbeats on the Redis clock")
		want := []redisdelay.WorkerSubscription{{Topic: orders, Group: "billing"}, {Topic: invoices, Group: "billing"}}
		slices.SortFunc(want, func(a, b redisdelay.WorkerSubscription) int { return strings.Compare(a.Topic, b.Topic) })
		assert.Equal(t, want, w.Subscriptions)
		assert.Zero(t, w.InFlight)

		// A handler holds a message: in flight.
		require.NoError(t, pub.Publish(orders, message.NewMessage("order-1", nil)))
		msg := receive(t, ch, 5*time.Second)
		waitWorkers(t, in, "one message in flight", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
			return len(ws) == 1 && ws[0].InFlight == 1 && ws[0].LastBeat.After(w.LastBeat)
		})
		msg.Ack()
		waitWorkers(t, in, "nothing in flight after the ack", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
			return len(ws) == 1 && ws[0].InFlight == 0
		})

		// A subscription that stops leaves the record.
		cancel()
		waitWorkers(t, in, "only the orders subscription", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
			return len(ws) == 1 && len(ws[0].Subscriptions) == 1 && ws[0].Subscriptions[0].Topic == orders
		})

		// Close deletes the record, and its keys are gone.
		require.NoError(t, sub.Close())
		assert.Empty(t, workersOf(t, in, redisdelay.WorkersOptions{}))
		assert.Empty(t, workerKeys(t, b, redisdelay.DefaultKeyPrefix), "Close leaves no key of the records")
	})
}

// killedSubscriber starts a Subscriber of prefix on a client of its own, waits for its record
// and closes the client under it: its heartbeat can neither refresh nor delete the record, as
// after a SIGKILL. It returns the record.
func killedSubscriber(t *testing.T, b backend, in *redisdelay.Inspector, prefix string, heartbeat time.Duration) redisdelay.WorkerInfo {
	t.Helper()
	client := newClientLike(b)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, KeyPrefix: prefix, Consumer: "killed", WorkerHeartbeat: heartbeat}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	subscribe(t, sub, newTopic())
	var killed redisdelay.WorkerInfo
	waitWorkers(t, in, "the record", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
		for _, w := range ws {
			if w.Consumer == "killed" {
				killed = w
				return true
			}
		}
		return false
	})
	require.NoError(t, client.Close())
	return killed
}

func TestAWorkerThatStopsRefreshingExpiresWithItsKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "w" + watermill.NewShortUUID() + ":"
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		killed := killedSubscriber(t, b, in, prefix, 100*time.Millisecond)
		require.Len(t, workerKeys(t, b, prefix), 3)
		waitWorkers(t, in, "the record to expire", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool { return len(ws) == 0 })
		if b.miniredis != nil {
			// miniredis expires keys only when told that time passed: Workers left the expired
			// record out by the Redis clock alone.
			require.Len(t, workerKeys(t, b, prefix), 3)
			b.miniredis.FastForward(time.Second)
		} else {
			assert.False(t, time.Now().Before(killed.Expires.Add(-50*time.Millisecond)), "gone before its expiry %s", killed.Expires)
		}
		require.Eventually(t, func() bool { return len(workerKeys(t, b, prefix)) == 0 }, 5*time.Second, 10*time.Millisecond,
			"the keys expire with the last record: %v", workerKeys(t, b, prefix))
	})
}

func TestARefreshDropsTheRecordsThatExpired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "w" + watermill.NewShortUUID() + ":"
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		// The live record outlasts the killed one, so the keys stay: the live Subscriber's
		// refreshes drop the killed one's entries.
		live := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.KeyPrefix, c.WorkerHeartbeat = prefix, 200*time.Millisecond })
		subscribe(t, live, newTopic())
		killedSubscriber(t, b, in, prefix, 50*time.Millisecond)
		info := workerKeys(t, b, prefix)[2]
		require.True(t, strings.HasSuffix(info, "{workers}:info"), info)
		require.Eventually(t, func() bool { return b.client.HLen(context.Background(), info).Val() == 1 }, 5*time.Second, 10*time.Millisecond,
			"the killed record's entry is dropped")
		ws := workersOf(t, in, redisdelay.WorkersOptions{})
		require.Len(t, ws, 1)
		assert.NotEqual(t, "killed", ws[0].Consumer)
		require.NoError(t, live.Close())
		assert.Empty(t, workerKeys(t, b, prefix), "the last Close leaves no key")
	})
}

func TestWorkersArePagedInKindAndIDOrderWithACursor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "p" + watermill.NewShortUUID() + ":"
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		for range 5 {
			subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.KeyPrefix = prefix }), newTopic())
		}
		// One that keeps no record.
		subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.KeyPrefix, c.WorkerHeartbeat = prefix, -1 }), newTopic())
		all := waitWorkers(t, in, "5 records", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool { return len(ws) == 5 })

		var paged []redisdelay.WorkerInfo
		var sizes []int
		opts := redisdelay.WorkersOptions{Limit: 2}
		for {
			page, err := in.Workers(context.Background(), opts)
			require.NoError(t, err)
			paged = append(paged, page.Workers...)
			sizes = append(sizes, len(page.Workers))
			if page.NextCursor == "" {
				break
			}
			require.Less(t, len(sizes), 5, "the cursor does not advance")
			opts.Cursor = page.NextCursor
		}
		assert.Equal(t, []int{2, 2, 1}, sizes)
		ids := func(ws []redisdelay.WorkerInfo) []string {
			var out []string
			for _, w := range ws {
				out = append(out, w.ID)
			}
			return out
		}
		assert.Equal(t, ids(all), ids(paged), "the pages hold every record once, in order")
		assert.True(t, slices.IsSorted(ids(paged)), "in ID order: %v", ids(paged))

		_, err = in.Workers(context.Background(), redisdelay.WorkersOptions{Cursor: "not a cursor"})
		assert.ErrorContains(t, err, `malformed cursor "not a cursor"`)
		_, err = in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: "robot"})
		assert.ErrorContains(t, err, `unknown kind "robot"`)
		_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, WorkerHeartbeat: time.Millisecond}, nil)
		assert.ErrorContains(t, err, "SubscriberConfig.WorkerHeartbeat is 1ms")
	})
}
