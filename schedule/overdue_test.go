package schedule_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// schedulerRecords returns the first page of the Schedulers' worker records under in's prefix.
func schedulerRecords(t *testing.T, in *redisdelay.Inspector) []redisdelay.WorkerInfo {
	t.Helper()
	page, err := in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: redisdelay.WorkerScheduler})
	require.NoError(t, err)
	return page.Workers
}

func TestARunningSchedulerIsListedAsASchedulerUntilClosed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newSchedulerEnv(t, b)
		in := e.inspector(t)
		// One subscription: once the record shows, Run has subscribed, and Close stops it.
		s := e.scheduler(t, func(c *schedule.Config) {
			c.Consumer, c.WorkerHeartbeat, c.Concurrency = "cron-1", 20*time.Millisecond, 1
		})
		require.Empty(t, schedulerRecords(t, in), "no record before Run")
		e.run(t, s)
		var ws []redisdelay.WorkerInfo
		require.Eventually(t, func() bool {
			page, err := in.Workers(context.Background(), redisdelay.WorkersOptions{})
			ws = page.Workers
			return err == nil && len(ws) == 1
		}, schedWait, 10*time.Millisecond, "the Scheduler's record")
		w := ws[0]
		assert.Equal(t, redisdelay.WorkerScheduler, w.Kind, "a Scheduler, not a plain subscriber")
		assert.Equal(t, "cron-1", w.Consumer)
		assert.Equal(t, 2*time.Second, w.LeaseTimeout, "the Scheduler's lease")
		assert.Equal(t, []redisdelay.WorkerSubscription{{Topic: schedule.TickTopic, Group: schedule.TickGroup}}, w.Subscriptions)
		assert.Equal(t, 60*time.Millisecond, w.Expires.Sub(w.LastBeat))
		filtered := schedulerRecords(t, in)
		require.Len(t, filtered, 1, "the kind filter finds it")
		assert.Equal(t, w.ID, filtered[0].ID)
		page, err := in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: redisdelay.WorkerSubscriber})
		require.NoError(t, err)
		assert.Empty(t, page.Workers)

		require.NoError(t, s.Close())
		assert.Empty(t, schedulerRecords(t, in), "Close deletes the record")
	})
}

// TestAPendingTickNoSchedulerActedOnIsOverdueWithTheFix moves miniredis's clock past a tick:
// with no Scheduler, then with one whose tick group is paused, the tick is overdue, and the
// reason says which; once the Scheduler acts on it, it is not.
func TestAPendingTickNoSchedulerActedOnIsOverdueWithTheFix(t *testing.T) {
	b := embeddedRedis(t)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	b.miniredis.SetTime(start)
	e := newSchedulerEnv(t, b)
	ctx := context.Background()
	in := e.inspector(t)
	s := e.scheduler(t, func(c *schedule.Config) { c.WorkerHeartbeat = 20 * time.Millisecond })
	_, err := s.Put(ctx, schedule.Schedule{Name: "job", Spec: "@every 1m", Topic: "jobs"})
	require.NoError(t, err)
	get := func() schedule.Info {
		t.Helper()
		info, err := schedule.Get(ctx, in, "job")
		require.NoError(t, err)
		return info
	}
	info := get()
	require.Equal(t, start.Add(time.Minute), info.Pending.UTC())
	assert.False(t, info.Overdue, "not due yet")

	// Due a lease ago exactly: not yet overdue. Past it, with no Scheduler: overdue.
	b.miniredis.SetTime(start.Add(time.Minute + schedule.DefaultLeaseTimeout))
	assert.False(t, get().Overdue, "a Scheduler may still be acting on it")
	b.miniredis.SetTime(start.Add(time.Minute + schedule.DefaultLeaseTimeout + time.Second))
	info = get()
	assert.True(t, info.Overdue)
	assert.Equal(t, fmt.Sprintf("no Scheduler is running for key prefix %q: start one (schedule.New, then Run)", e.prefix), info.OverdueReason)
	infos, _, err := schedule.List(ctx, in, "", 0)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, info.OverdueReason, infos[0].OverdueReason, "List marks it as Get does")

	// A Scheduler runs, but its consumer group is paused: it cannot act on the tick. (The group
	// is registered first, so that it can be paused before the Scheduler runs.)
	require.NoError(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
		c.KeyPrefix, c.ConsumerGroup = e.prefix, schedule.TickGroup
	}).SubscribeInitialize(schedule.TickTopic))
	require.NoError(t, in.Pause(ctx, schedule.TickTopic, schedule.TickGroup))
	e.run(t, s)
	require.Eventually(t, func() bool { return len(schedulerRecords(t, in)) == 1 }, schedWait, 10*time.Millisecond)
	info = get()
	assert.True(t, info.Overdue)
	assert.True(t, strings.HasPrefix(info.OverdueReason, fmt.Sprintf("1 Scheduler(s) running for key prefix %q, but none has acted on this tick for 11s", e.prefix)), info.OverdueReason)

	// Resumed, it acts on the tick: the pending tick is the next one, not overdue.
	require.NoError(t, in.Resume(ctx, schedule.TickTopic, schedule.TickGroup))
	require.Eventually(t, func() bool {
		info, err := schedule.Get(ctx, in, "job")
		return err == nil && info.LastTick.Equal(start.Add(time.Minute))
	}, schedWait, 10*time.Millisecond, "the Scheduler acts on the tick")
	info = get()
	assert.False(t, info.Overdue)
	assert.Empty(t, info.OverdueReason)
	assert.Equal(t, start.Add(2*time.Minute), info.Pending.UTC())
}
