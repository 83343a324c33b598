package redisdelaytest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// runScheduler makes a Scheduler on the Queue's Publisher, puts sch and runs the Scheduler
// (go Run, as an application does) until the test ends.
func runScheduler(t *testing.T, q *redisdelaytest.Queue, edit func(*schedule.Config), sch schedule.Schedule) *schedule.Scheduler {
	t.Helper()
	cfg := schedule.Config{Publisher: q.Publisher()}
	if edit != nil {
		edit(&cfg)
	}
	sched, err := schedule.New(cfg, nil)
	require.NoError(t, err)
	_, err = sched.Put(context.Background(), sch)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, sched.Close())
	})
	return sched
}

// tick is what the test saw of one tick's message: its nominal tick time, its due time and the
// virtual clock when the handler ran.
type tick struct{ nominal, due, handled time.Time }

// recordTicks acks every message of topic for group "app" and returns what it saw so far.
func recordTicks(t *testing.T, q *redisdelaytest.Queue, topic string) func() []tick {
	var mu sync.Mutex
	var seen []tick
	q.Handle(topic, "app", func(msg *message.Message) error {
		nominal, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.TickTimeMetadataKey))
		due, err2 := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
		mu.Lock()
		defer mu.Unlock()
		if err == nil && err2 == nil {
			seen = append(seen, tick{nominal, due, q.Now()})
		}
		return nil
	})
	return func() []tick {
		mu.Lock()
		defer mu.Unlock()
		return append([]tick(nil), seen...)
	}
}

// requireTicksAt fails unless got are the ticks want, each due and handled at its nominal time.
func requireTicksAt(t *testing.T, got []tick, want []time.Time) {
	t.Helper()
	require.Len(t, got, len(want), "ticks %v", got)
	for i, w := range want {
		if !got[i].nominal.Equal(w) || !got[i].due.Equal(w) || !got[i].handled.Equal(w) {
			t.Fatalf("tick %d: nominal %s, due %s, handled at %s; want all %s", i+1, got[i].nominal, got[i].due, got[i].handled, w)
		}
	}
}

// everyFrom returns n instants, the first at first, step apart.
func everyFrom(first time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * step)
	}
	return out
}

func TestDailyScheduleFiresTwiceIn48VirtualHoursAtItsTicks(t *testing.T) {
	began := time.Now()
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ticks := recordTicks(t, q, "reports")
	runScheduler(t, q, nil, schedule.Schedule{Name: "daily", Spec: "0 6 * * *", Topic: "reports"})

	q.Advance(48 * time.Hour)

	first := redisdelaytest.DefaultStart.Add(6 * time.Hour)
	requireTicksAt(t, ticks(), []time.Time{first, first.Add(24 * time.Hour)})
	info, err := schedule.Get(context.Background(), q.Inspector(), "daily")
	require.NoError(t, err)
	require.Equal(t, int64(2), info.Published)
	require.Equal(t, first.Add(48*time.Hour), info.Pending.UTC(), "the third tick is armed")
	t.Logf("a daily schedule over 48 virtual hours: %s of wall time", time.Since(began))
}

func TestHourlyScheduleFiresAtEachOf48Ticks(t *testing.T) {
	began := time.Now()
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ticks := recordTicks(t, q, "jobs")
	// One subscription of the tick topic: the kit wakes each at every stop.
	runScheduler(t, q, func(c *schedule.Config) { c.Concurrency = 1 },
		schedule.Schedule{Name: "hourly", Spec: "0 * * * *", Topic: "jobs"})

	q.Advance(48 * time.Hour)

	requireTicksAt(t, ticks(), everyFrom(redisdelaytest.DefaultStart.Add(time.Hour), time.Hour, 48))
	t.Logf("an hourly schedule over 48 virtual hours: %s of wall time", time.Since(began))
}

func TestPerMinuteScheduleFiresAtEachTickWithAndWithoutResolution(t *testing.T) {
	for name, c := range map[string]struct {
		resolution, over time.Duration
	}{
		"no resolution":          {0, 30 * time.Minute},
		"resolution of a minute": {time.Minute, 2 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			began := time.Now()
			q := redisdelaytest.New(t, redisdelaytest.Options{Resolution: c.resolution})
			ticks := recordTicks(t, q, "jobs")
			// One subscription of the tick topic: the kit wakes each at every stop.
			runScheduler(t, q, func(c *schedule.Config) { c.Concurrency = 1 },
				schedule.Schedule{Name: "minutely", Spec: "* * * * *", Topic: "jobs"})

			q.Advance(c.over)

			requireTicksAt(t, ticks(), everyFrom(redisdelaytest.DefaultStart.Add(time.Minute), time.Minute, int(c.over/time.Minute)))
			t.Logf("a per-minute schedule over %s of virtual time: %s of wall time", c.over, time.Since(began))
		})
	}
}

func TestAdvanceReturnsOnceTheSchedulerActedOnTheTickDueAtItsTarget(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ticks := recordTicks(t, q, "reports")
	// With OverlapSkip nothing is stored ahead: the Scheduler publishes each tick's message when
	// it acts on the tick, at the tick.
	runScheduler(t, q, nil, schedule.Schedule{Name: "daily", Spec: "0 6 * * *", Topic: "reports", Overlap: schedule.OverlapSkip})
	at := redisdelaytest.DefaultStart.Add(6 * time.Hour)

	q.AdvanceTo(at.Add(-time.Microsecond))
	require.Empty(t, ticks(), "no tick before its time")
	q.AdvanceTo(at)
	requireTicksAt(t, ticks(), []time.Time{at})
	info, err := schedule.Get(context.Background(), q.Inspector(), "daily")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Published)
	q.AdvanceTo(at.Add(24 * time.Hour))
	requireTicksAt(t, ticks(), []time.Time{at, at.Add(24 * time.Hour)})
}

func TestOverlapPoliciesOnTheVirtualClock(t *testing.T) {
	for _, policy := range []schedule.OverlapPolicy{schedule.OverlapSkip, schedule.OverlapBufferOne} {
		t.Run(string(policy), func(t *testing.T) {
			// A lease of an hour: the kit keeps a held message's lease with a stop every 20 minutes.
			q := redisdelaytest.New(t, redisdelaytest.Options{Subscriber: redisdelay.SubscriberConfig{LeaseTimeout: time.Hour}})
			msgs, err := q.Subscriber("app").Subscribe(context.Background(), "jobs")
			require.NoError(t, err)
			runScheduler(t, q, func(c *schedule.Config) { c.BufferRecheckInterval = 10 * time.Minute },
				schedule.Schedule{Name: "hourly", Spec: "0 * * * *", Topic: "jobs", Overlap: policy})
			start := redisdelaytest.DefaultStart

			// The 01:00 tick's message, taken as it is handed out and held across the next ticks.
			first := receiveLater(t, q, msgs)
			q.AdvanceTo(start.Add(time.Hour))
			held := <-first
			require.Equal(t, start.Add(time.Hour).Format(time.RFC3339Nano), held.Metadata.Get(redisdelay.TickTimeMetadataKey))
			q.AdvanceTo(start.Add(2*time.Hour + 25*time.Minute))
			held.Ack()
			q.Settle()
			info, err := schedule.Get(context.Background(), q.Inspector(), "hourly")
			require.NoError(t, err)
			if policy == schedule.OverlapSkip {
				require.Equal(t, int64(1), info.Skipped, "the 02:00 tick is skipped")
				require.Equal(t, int64(1), info.Published)
				return
			}
			require.Equal(t, start.Add(2*time.Hour), info.Buffered.UTC(), "the 02:00 tick is held back")
			second := receiveLater(t, q, msgs)
			q.Advance(5 * time.Minute) // to its recheck, at 02:00 + 3 × 10 minutes
			next := <-second
			require.Equal(t, start.Add(2*time.Hour).Format(time.RFC3339Nano), next.Metadata.Get(redisdelay.TickTimeMetadataKey))
			require.Equal(t, start.Add(2*time.Hour+30*time.Minute), q.Received("app")[1].At, "handed out at the recheck")
			next.Ack()
		})
	}
}

// receiveLater takes the next message of msgs with Receive, in a goroutine: the message is
// handed out during the test's next Advance, which waits for it to be taken.
func receiveLater(t *testing.T, q *redisdelaytest.Queue, msgs <-chan *message.Message) <-chan *message.Message {
	out := make(chan *message.Message, 1)
	go func() { out <- q.Receive(t, msgs) }()
	return out
}

func TestAdvanceWaitsForASchedulerMadeOnThePublisherToRun(t *testing.T) {
	ft := &fakeT{}
	q := redisdelaytest.New(ft, redisdelaytest.Options{SettleTimeout: 200 * time.Millisecond})
	defer ft.cleanup()
	sched, err := schedule.New(schedule.Config{Publisher: q.Publisher()}, nil)
	require.NoError(t, err)
	func() {
		defer func() { _ = recover() }()
		q.Advance(time.Hour)
	}()
	require.True(t, strings.Contains(ft.failure, `consumer group "scheduler" made on the Queue's Publisher have not subscribed yet, and none of the group runs`), "failure %q", ft.failure)

	// Once closed, it is not waited for.
	require.NoError(t, sched.Close())
	ft.failure = ""
	q.Advance(time.Hour)
	require.Empty(t, ft.failure)
}

func TestASchedulerMadeOnlyToPutIsNotWaitedForWhileAnotherRuns(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ticks := recordTicks(t, q, "reports")
	runScheduler(t, q, nil, schedule.Schedule{Name: "daily", Spec: "0 6 * * *", Topic: "reports"})
	admin, err := schedule.New(schedule.Config{Publisher: q.Publisher()}, nil)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Put(context.Background(), schedule.Schedule{Name: "other", Spec: "0 7 * * *", Topic: "reports"})
	require.NoError(t, err)

	q.Advance(24 * time.Hour)

	start := redisdelaytest.DefaultStart
	requireTicksAt(t, ticks(), []time.Time{start.Add(6 * time.Hour), start.Add(7 * time.Hour)})
}
