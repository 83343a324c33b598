package schedule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// 1-second schedule and checks that each tick's message arrives once, in tick order, never
// before its nominal time, with its metadata and key.
func TestSchedulerPublishesEachTickOnceWithSeveralInstances(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newSchedulerEnv(t, b)
		msgs := e.subscribe(t, "reports", "mailer")
		first := e.scheduler(t, nil)
		for i := 0; i < 3; i++ {
			e.run(t, e.scheduler(t, nil))
		}
		outcome, err := first.Put(context.Background(), schedule.Schedule{
			Name: "every-second", Spec: "@every 1s", Topic: "reports",
			Payload: []byte("hello"), Metadata: message.Metadata{"kind": "report"},
		})
		require.NoError(t, err)
		assert.Equal(t, schedule.Created, outcome)

		var ticks []time.Time
		for len(ticks) < 4 {
			msg := receive(t, msgs, schedWait)
			at := time.Now()
			tick := tickOf(t, msg)
			assert.False(t, at.Before(tick), "tick %s delivered early at %s", tick, at)
			assert.Equal(t, "every-second", msg.Metadata.Get(redisdelay.ScheduleMetadataKey))
			assert.Equal(t, schedule.TickKey("every-second", tick), msg.Metadata.Get(redisdelay.KeyMetadataKey))
			assert.Equal(t, "report", msg.Metadata.Get("kind"))
			assert.Equal(t, "hello", string(msg.Payload))
			msg.Ack()
			ticks = append(ticks, tick)
		}
		for i := 1; i < len(ticks); i++ {
			assert.Equal(t, time.Second, ticks[i].Sub(ticks[i-1]), "ticks %v", ticks)
		}
		var info schedule.Info
		require.Eventually(t, func() bool {
			var err error
			info, err = schedule.Get(context.Background(), e.inspector(t), "every-second")
			if err != nil { // the condition runs in a goroutine of its own: no require here
				return false
			}
			return info.Published >= 4
		}, schedWait, 10*time.Millisecond, "the count follows the messages")
		assert.Zero(t, info.Skipped)
		assert.Len(t, info.NextTicks, schedule.DefaultNextTicks)
	})
}

// TestSchedulePutIsIdempotentAndUpdatesRecomputeTheNextTick checks Put's outcomes and that an
// update drops the old definition's pending tick.
func TestSchedulePutIsIdempotentAndUpdatesRecomputeTheNextTick(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newSchedulerEnv(t, b)
		s := e.scheduler(t, nil)
		ctx := context.Background()
		sch := schedule.Schedule{Name: "nightly", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", Topic: "reports"}
		for _, want := range []schedule.PutOutcome{schedule.Created, schedule.Unchanged} {
			got, err := s.Put(ctx, sch)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		}
		in := e.inspector(t)
		before, err := schedule.Get(ctx, in, "nightly")
		require.NoError(t, err)
		berlin, _ := time.LoadLocation("Europe/Berlin")
		assert.Equal(t, 3, before.Pending.In(berlin).Hour(), "pending %s", before.Pending)

		sch.Spec = "0 4 * * *"
		got, err := s.Put(ctx, sch)
		require.NoError(t, err)
		assert.Equal(t, schedule.Updated, got)
		after, err := schedule.Get(ctx, in, "nightly")
		require.NoError(t, err)
		assert.Equal(t, 4, after.Pending.In(berlin).Hour())
		assert.NotEqual(t, before.Version, after.Version)
		stats, err := in.Stats(ctx, schedule.TickTopic)
		require.NoError(t, err)
		var scheduled int64
		for _, g := range stats {
			scheduled += g.Scheduled + g.Due
		}
		assert.Equal(t, int64(1), scheduled, "one tick message armed: the old one was cancelled")
	})
}

// TestScheduleRefusesABadDefinition checks that each bad field is named and nothing stored.
func TestScheduleRefusesABadDefinition(t *testing.T) {
	e := newSchedulerEnv(t, embeddedRedis(t))
	s := e.scheduler(t, nil)
	ok := schedule.Schedule{Name: "n", Spec: "@hourly", Topic: "t"}
	for _, c := range []struct {
		edit func(*schedule.Schedule)
		want string
	}{
		{func(s *schedule.Schedule) { s.Spec = "61 * * * *" }, "Spec"},
		{func(s *schedule.Schedule) { s.Spec = "TZ=UTC 0 * * * *" }, "time zone prefix"},
		{func(s *schedule.Schedule) { s.Spec = "@every 10ms" }, "at least 1s"},
		{func(s *schedule.Schedule) { s.TimeZone = "Mars/Olympus" }, "TimeZone"},
		{func(s *schedule.Schedule) { s.TimeZone = "Local" }, "each host's own zone"},
		{func(s *schedule.Schedule) { s.TimeZone = strings.Repeat("Europe/", 10) }, "more than 64"},
		{func(s *schedule.Schedule) { s.Spec = "0 0 1 1 *" + strings.Repeat(" ", 300) }, "more than 256"},
		{func(s *schedule.Schedule) { s.Spec = "0 0 30 2 *" }, "never ticks"},
		{func(s *schedule.Schedule) { s.Name = "rtl\u202E" }, "direction-changing character U+202E"},
		{func(s *schedule.Schedule) { s.Name = strings.Repeat("n", schedule.MaxNameLength+1) }, "more than 200"},
		{func(s *schedule.Schedule) { s.Topic = "" }, "Topic"},
		{func(s *schedule.Schedule) { s.Name = "" }, "schedule name"},
		{func(s *schedule.Schedule) { s.Overlap = "sometimes" }, "Overlap"},
		{func(s *schedule.Schedule) { s.CatchUp = "most" }, "CatchUp"},
		{func(s *schedule.Schedule) { s.Jitter = -time.Second }, "Jitter"},
		{func(s *schedule.Schedule) { s.Jitter = 2 * time.Minute }, "Jitter"},
		{func(s *schedule.Schedule) { s.Metadata = message.Metadata{"_redisdelay_x": "1"} }, "_redisdelay_x"},
	} {
		sch := ok
		c.edit(&sch)
		_, err := s.Put(context.Background(), sch)
		require.ErrorIs(t, err, schedule.ErrInvalid, c.want)
		assert.Contains(t, err.Error(), c.want)
		if strings.Contains(c.want, "name") || strings.Contains(c.want, "200") || strings.Contains(c.want, "direction") {
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, c.want)
		}
	}
	infos, _, err := schedule.List(context.Background(), e.inspector(t), "", 10)
	require.NoError(t, err)
	assert.Empty(t, infos)
}

// TestSchedulerIsAClientOfItsPublisher: a Scheduler publishes through the Publisher it is given
// and never closes it, and the Publisher's own OnDuplicate and KeyRetention stay its own: a
// message of a tick's key published by the application replaces the stored one. Once the
// application closes the Publisher, the Scheduler's publishes fail with ErrPublisherClosed.
func TestSchedulerIsAClientOfItsPublisher(t *testing.T) {
	e := newSchedulerEnv(t, embeddedRedis(t))
	ctx := context.Background()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: e.b.client, KeyPrefix: e.prefix, OnDuplicate: redisdelay.ReplaceExisting}, errorLogger{})
	require.NoError(t, err)
	s, err := schedule.New(schedule.Config{Publisher: pub}, errorLogger{})
	require.NoError(t, err)
	_, err = s.Put(ctx, schedule.Schedule{Name: "n", Spec: "@hourly", Topic: "t"})
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := s.Backfill(ctx, "n", from, from)
	require.NoError(t, err)
	require.Equal(t, schedule.BackfillResult{Published: 1}, res)
	res, err = s.Backfill(ctx, "n", from, from)
	require.NoError(t, err)
	assert.Equal(t, schedule.BackfillResult{Duplicates: 1}, res, "a tick's message keeps its key (KeepExisting)")
	outcomes, err := pub.PublishWithResult("t", redisdelay.WithKey(message.NewMessage("app", nil), schedule.TickKey("n", from)))
	require.NoError(t, err)
	assert.Equal(t, []redisdelay.Outcome{redisdelay.OutcomeReplaced}, outcomes, "the Publisher's own OnDuplicate")

	require.NoError(t, s.Close())
	require.NoError(t, pub.Publish("t", message.NewMessage("after", nil)), "Close leaves the Publisher open")
	s, err = schedule.New(schedule.Config{Publisher: pub}, errorLogger{})
	require.NoError(t, err)
	require.NoError(t, pub.Close())
	_, err = s.Trigger(ctx, "n")
	assert.ErrorIs(t, err, redisdelay.ErrPublisherClosed)
}

// TestScheduleOperationsAndCleanup pauses, resumes, triggers, backfills and deletes a
// schedule, then checks that the keys return to the baseline.
func TestScheduleOperationsAndCleanup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newSchedulerEnv(t, b)
		ctx := context.Background()
		msgs := e.subscribe(t, "reports", "mailer")
		s := e.schedulerOf(t, func(c *redisdelay.PublisherConfig) { c.OperationTimeout = time.Second }, func(c *schedule.Config) {
			c.TickKeyRetention = 3 * time.Second
		})
		e.run(t, s)
		_, err := s.Put(ctx, schedule.Schedule{Name: "daily", Spec: "0 0 9 * * *", Topic: "reports"})
		require.NoError(t, err)

		changed, err := s.Pause(ctx, "daily")
		require.NoError(t, err)
		assert.True(t, changed)
		info, err := schedule.Get(ctx, e.inspector(t), "daily")
		require.NoError(t, err)
		assert.True(t, info.Paused)
		page, more, err := schedule.List(ctx, e.inspector(t), "", 10)
		require.NoError(t, err)
		assert.False(t, more)
		require.Len(t, page, 1)
		assert.Equal(t, "daily", page[0].Schedule.Name)
		assert.True(t, page[0].Paused)
		assert.True(t, info.Pending.IsZero())
		changed, err = s.Resume(ctx, "daily")
		require.NoError(t, err)
		assert.True(t, changed)
		info, err = schedule.Get(ctx, e.inspector(t), "daily")
		require.NoError(t, err)
		assert.False(t, info.Paused)
		assert.Equal(t, 9, info.Pending.UTC().Hour())

		id, err := s.Trigger(ctx, "daily")
		require.NoError(t, err)
		got := receive(t, msgs, schedWait)
		assert.Equal(t, id, got.UUID)
		got.Ack()

		day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		res, err := s.Backfill(ctx, "daily", day, day.Add(72*time.Hour))
		require.NoError(t, err)
		assert.Equal(t, schedule.BackfillResult{Published: 3}, res)
		for i := 0; i < 3; i++ {
			msg := receive(t, msgs, schedWait)
			assert.Equal(t, day.Add(time.Duration(i)*24*time.Hour+9*time.Hour), tickOf(t, msg).UTC())
			msg.Ack()
		}
		res, err = s.Backfill(ctx, "daily", day, day.Add(72*time.Hour))
		require.NoError(t, err)
		assert.Equal(t, schedule.BackfillResult{Duplicates: 3}, res, "within TickKeyRetention, a backfilled tick is stored once")
		_, err = s.Backfill(ctx, "daily", day, day.Add(5*365*24*time.Hour))
		require.ErrorIs(t, err, schedule.ErrInvalid)

		require.NoError(t, s.Delete(ctx, "daily"))
		require.ErrorIs(t, s.Delete(ctx, "daily"), redisdelay.ErrNotFound)
		_, err = s.Pause(ctx, "daily")
		require.ErrorIs(t, err, redisdelay.ErrNotFound)

		// What is left of the schedule: nothing in the tick topic's slot but its registration
		// (seq, groups, the Schedulers' group) and call tokens, which expire.
		deadline := time.Now().Add(10 * time.Second)
		for {
			keys, err := scanKeys(ctx, b, e.prefix+"{"+schedule.TickTopic+"}*")
			require.NoError(t, err)
			left := withoutMatching(keys, func(k string) bool {
				for _, kept := range []string{":seq", ":groups", ":epoch", ":lease", ":window", ":call:", ":claim:"} {
					if strings.Contains(k, kept) {
						return true
					}
				}
				return false
			})
			if len(left) == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "keys left after Delete: %v", left)
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func withoutMatching(keys []string, drop func(string) bool) []string {
	var out []string
	for _, k := range keys {
		if !drop(k) {
			out = append(out, k)
		}
	}
	return out
}

// TestInspectorSchedulesReadsOnePageAtATime pages through schedules in name order.
func TestInspectorSchedulesReadsOnePageAtATime(t *testing.T) {
	e := newSchedulerEnv(t, embeddedRedis(t))
	ctx := context.Background()
	s := e.scheduler(t, nil)
	for _, name := range []string{"e", "a", "d", "b", "c"} {
		_, err := s.Put(ctx, schedule.Schedule{Name: name, Spec: "@hourly", Topic: "t"})
		require.NoError(t, err)
	}
	in := e.inspector(t)
	var names []string
	after := ""
	for pages := 1; ; pages++ {
		page, more, err := schedule.List(ctx, in, after, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 2)
		for _, info := range page {
			names = append(names, info.Schedule.Name)
		}
		if !more {
			assert.Equal(t, 3, pages)
			break
		}
		after = page[len(page)-1].Schedule.Name
	}
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, names)
}

// TestSchedulePausedAndResumedAtOnceKeepsItsNextTick pauses and resumes a schedule within one
// tick: the message stored ahead is cancelled and stored again for the same tick, which is
// delivered once.
func TestSchedulePausedAndResumedAtOnceKeepsItsNextTick(t *testing.T) {
	b := embeddedRedis(t)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	b.miniredis.SetTime(start)
	e := newSchedulerEnv(t, b)
	ctx := context.Background()
	s := e.scheduler(t, nil)
	_, err := s.Put(ctx, schedule.Schedule{Name: "job", Spec: "@every 10s", Topic: "jobs"})
	require.NoError(t, err)
	_, err = s.Pause(ctx, "job")
	require.NoError(t, err)
	_, err = s.Resume(ctx, "job")
	require.NoError(t, err)
	b.miniredis.SetTime(start.Add(10*time.Second + 100*time.Millisecond))
	msgs := e.subscribe(t, "jobs", "worker")
	e.run(t, s)
	msg := receive(t, msgs, schedWait)
	assert.Equal(t, start.Add(10*time.Second), tickOf(t, msg).UTC())
	msg.Ack()
	require.Eventually(t, func() bool {
		info, err := schedule.Get(ctx, e.inspector(t), "job")
		if err != nil { // the condition runs in a goroutine of its own: no require here
			return false
		}
		return info.Published == 1
	}, schedWait, 10*time.Millisecond)
	select {
	case msg := <-msgs:
		t.Fatalf("tick %s delivered twice or out of turn", tickOf(t, msg))
	default:
	}
}

// TestSchedulesOnAPartitionedTopic runs a schedule whose topic has 3 partitions (each tick's
// message goes to its key's partition): ticks arrive once each, in order, and a pause and
// resume within a tick keeps the next tick (its message, stored ahead on its key's partition,
// is cancelled and its key freed there).
func TestSchedulesOnAPartitionedTopic(t *testing.T) {
	for _, be := range []struct {
		name  string
		start func(*testing.T) backend
	}{{"redis", realRedis}, {"cluster", clusterBackend}} {
		if one := redistest.OneBackend(); one != "" && be.name != one {
			continue // the quick run: one backend (REDISDELAY_LONG=1 runs both)
		}
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := newSchedulerEnv(t, be.start(t))
			ctx := context.Background()
			sub := newSubscriber(t, e.b, func(c *redisdelay.SubscriberConfig) {
				c.KeyPrefix, c.ConsumerGroup, c.Partitions = e.prefix, "worker", 3
			})
			require.NoError(t, sub.SubscribeInitialize("parts"))
			msgs := subscribe(t, sub, "parts")
			partitioned := func(c *redisdelay.PublisherConfig) { c.Partitions = 3 }
			s := e.schedulerOf(t, partitioned, nil)
			e.run(t, s)
			e.run(t, e.schedulerOf(t, partitioned, nil))
			_, err := s.Put(ctx, schedule.Schedule{Name: "p", Spec: "@every 1s", Topic: "parts"})
			require.NoError(t, err)
			seen := map[time.Time]bool{}
			var last time.Time
			for len(seen) < 6 {
				msg := receive(t, msgs, schedWait)
				tick := tickOf(t, msg).UTC()
				msg.Ack()
				require.False(t, seen[tick], "tick %s delivered twice", tick)
				require.True(t, last.IsZero() || tick.Equal(last.Add(time.Second)), "tick %s after %s", tick, last)
				seen[tick], last = true, tick
				if len(seen) == 3 {
					_, err := s.Pause(ctx, "p")
					require.NoError(t, err)
					_, err = s.Resume(ctx, "p")
					require.NoError(t, err)
				}
			}
		})
	}
}
