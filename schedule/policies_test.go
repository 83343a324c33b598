package schedule_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// TestScheduleOverlapPolicies holds the first tick's message unacked and checks what Skip and
// BufferOne do with the ticks that fall due meanwhile.
func TestScheduleOverlapPolicies(t *testing.T) {
	for _, policy := range []schedule.OverlapPolicy{schedule.OverlapSkip, schedule.OverlapBufferOne} {
		t.Run(string(policy), func(t *testing.T) {
			e := newSchedulerEnv(t, realRedis(t))
			ctx := context.Background()
			msgs := e.subscribe(t, "jobs", "worker")
			s := e.scheduler(t, func(c *schedule.Config) { c.BufferRecheckInterval = 50 * time.Millisecond })
			e.run(t, s)
			_, err := s.Put(ctx, schedule.Schedule{Name: "job", Spec: "@every 1s", Topic: "jobs", Overlap: policy})
			require.NoError(t, err)
			first := receive(t, msgs, schedWait)
			firstTick := tickOf(t, first)

			in := e.inspector(t)
			var info schedule.Info
			require.Eventually(t, func() bool {
				info, err = schedule.Get(ctx, in, "job")
				if err != nil { // the condition runs in a goroutine of its own: no require here
					return false
				}
				return info.Skipped >= 1
			}, schedWait, 20*time.Millisecond, "a tick is skipped while the first is held")
			select {
			case msg := <-msgs:
				t.Fatalf("tick %s delivered while the first was held", tickOf(t, msg))
			default:
			}
			if policy == schedule.OverlapBufferOne {
				assert.Equal(t, firstTick.Add(time.Second).UTC(), info.Buffered.UTC(), "the second tick is held back")
			}
			ackedAt := time.Now()
			first.Ack()
			next := receive(t, msgs, schedWait)
			if policy == schedule.OverlapBufferOne {
				assert.Equal(t, firstTick.Add(time.Second).UTC(), tickOf(t, next).UTC(), "the held tick follows the ack")
				assert.Less(t, time.Since(ackedAt), 3*time.Second, "within a few recheck intervals")
			} else {
				assert.True(t, tickOf(t, next).After(firstTick.Add(time.Second)), "the skipped tick never comes")
			}
			next.Ack()
		})
	}
}

// TestScheduleCatchUp stops time for the Schedulers (miniredis's clock), moves it past several
// ticks and checks which are published and which skipped. With OverlapAllowAll the first
// tick's message was stored ahead, so it is delivered however late; with another policy the
// tick decides, and it is too late.
func TestScheduleCatchUp(t *testing.T) {
	for _, c := range []struct {
		catchUp schedule.CatchUpPolicy
		overlap schedule.OverlapPolicy
		want    []int // seconds after start
	}{
		{schedule.CatchUpAll, schedule.OverlapAllowAll, []int{10, 70, 80, 90, 100}},
		{schedule.CatchUpLatest, schedule.OverlapAllowAll, []int{10, 100}},
		{schedule.CatchUpAll, schedule.OverlapSkip, []int{100}},
		{schedule.CatchUpLatest, schedule.OverlapSkip, []int{100}},
	} {
		t.Run(string(c.catchUp)+"/"+string(c.overlap), func(t *testing.T) {
			b := embeddedRedis(t)
			start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
			b.miniredis.SetTime(start)
			e := newSchedulerEnv(t, b)
			ctx := context.Background()
			s := e.scheduler(t, nil)
			_, err := s.Put(ctx, schedule.Schedule{Name: "job", Spec: "@every 10s", Topic: "jobs", CatchUp: c.catchUp, Overlap: c.overlap, CatchUpWindow: 35 * time.Second})
			require.NoError(t, err)
			// Every Scheduler was down for 100 s: ticks at +10 s ... +100 s, of which +70 s
			// to +100 s are within the window. (OverlapSkip publishes one tick at most: the
			// others would overlap it.)
			b.miniredis.SetTime(start.Add(100*time.Second + 500*time.Millisecond))
			// Subscribed after the jump: a subscription reads the Redis clock through an offset to
			// its own, which a jump of miniredis's clock would leave wrong until its next claim.
			msgs := e.subscribe(t, "jobs", "worker")
			e.run(t, s)
			var want, got []time.Time
			for _, sec := range c.want {
				want = append(want, start.Add(time.Duration(sec)*time.Second))
			}
			for range want {
				msg := receive(t, msgs, schedWait)
				got = append(got, tickOf(t, msg).UTC())
				msg.Ack()
			}
			slices.SortFunc(got, time.Time.Compare)
			assert.Equal(t, want, got)
			var info schedule.Info
			require.Eventually(t, func() bool {
				info, err = schedule.Get(ctx, e.inspector(t), "job")
				if err != nil { // the condition runs in a goroutine of its own: no require here
					return false
				}
				return info.Published == int64(len(want))
			}, schedWait, 10*time.Millisecond)
			assert.Equal(t, int64(10-len(want)), info.Skipped)
			assert.Equal(t, start.Add(110*time.Second), info.Pending.UTC())
			select {
			case msg := <-msgs:
				t.Fatalf("tick %s delivered too", tickOf(t, msg))
			default:
			}
		})
	}
}
