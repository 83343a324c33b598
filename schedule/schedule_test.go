package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// dstCases are the daylight-saving days of 2026 in Berlin (spring forward 29 March 02:00 CET
// -> 03:00 CEST; fall back 25 October 03:00 CEST -> 02:00 CET) and New York (8 March 02:00
// EST -> 03:00 EDT; 1 November 02:00 EDT -> 01:00 EST), with the ticks that docs/schedules.md
// promises, in UTC.
var dstCases = []struct {
	name, tz, spec string
	from           time.Time
	want           []string
}{
	{"berlin spring daily in the gap fires at its end", "Europe/Berlin", "30 2 * * *", utc("2026-03-27T12:00:00Z"),
		[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
	{"berlin spring daily at the gap's start", "Europe/Berlin", "0 2 * * *", utc("2026-03-27T12:00:00Z"),
		[]string{"2026-03-28T01:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"}},
	{"berlin fall daily in the repeated hour fires once", "Europe/Berlin", "30 2 * * *", utc("2026-10-23T12:00:00Z"),
		[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
	{"berlin fall hourly follows elapsed time", "Europe/Berlin", "0 * * * *", utc("2026-10-24T23:30:00Z"),
		[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
	{"berlin spring hourly follows elapsed time", "Europe/Berlin", "0 * * * *", utc("2026-03-28T23:30:00Z"),
		[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
	{"new york spring daily in the gap fires at its end", "America/New_York", "30 2 * * *", utc("2026-03-06T12:00:00Z"),
		[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
	{"new york fall daily in the repeated hour fires once", "America/New_York", "30 1 * * *", utc("2026-10-30T12:00:00Z"),
		[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
	{"new york fall hourly follows elapsed time", "America/New_York", "0 * * * *", utc("2026-11-01T03:30:00Z"),
		[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
	{"new york spring weekly on the day of the gap", "America/New_York", "15 2 * * 0", utc("2026-03-01T12:00:00Z"),
		[]string{"2026-03-08T07:00:00Z", "2026-03-15T06:15:00Z"}},
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func utcStrings(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.UTC().Format(time.RFC3339)
	}
	return out
}

// TestScheduleTicksAcrossDaylightSaving checks the tick times of the spec alone.
func TestScheduleTicksAcrossDaylightSaving(t *testing.T) {
	for _, c := range dstCases {
		t.Run(c.name, func(t *testing.T) {
			ticks, err := schedule.Schedule{Name: "dst", Spec: c.spec, TimeZone: c.tz, Topic: "t"}.NextTicks(c.from, len(c.want))
			require.NoError(t, err)
			assert.Equal(t, c.want, utcStrings(ticks))
		})
	}
}

// TestSchedulerPublishesDaylightSavingTicks runs a Scheduler on miniredis's clock through each
// daylight-saving case: the clock jumps just past each tick, a Scheduler runs until it has
// acted on it, and the messages published (parked: the topic has no group) carry exactly the
// promised tick times.
func TestSchedulerPublishesDaylightSavingTicks(t *testing.T) {
	for _, c := range dstCases {
		t.Run(c.name, func(t *testing.T) {
			b := embeddedRedis(t)
			b.miniredis.SetTime(c.from)
			e := newSchedulerEnv(t, b)
			ctx := context.Background()
			put := e.scheduler(t, nil)
			_, err := put.Put(ctx, schedule.Schedule{Name: "dst", Spec: c.spec, TimeZone: c.tz, Topic: "jobs"})
			require.NoError(t, err)
			in := e.inspector(t)
			for i, want := range c.want {
				tick := utc(want)
				jumped := time.Now()
				b.miniredis.SetTime(tick.Add(100 * time.Millisecond))
				// A Scheduler started after the jump reads the new clock from its first claim.
				s := e.scheduler(t, func(cfg *schedule.Config) { cfg.Concurrency = 1 })
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- s.Run(runCtx) }()
				require.Eventually(t, func() bool {
					// miniredis's clock stands still unless set: it moves on with real time from
					// the jump, so that a lease (of a call cut short by the Scheduler's
					// OperationTimeout on a loaded machine) expires as it would on Redis.
					b.miniredis.SetTime(tick.Add(100*time.Millisecond + time.Since(jumped)))
					info, err := schedule.Get(ctx, in, "dst")
					if err != nil { // the condition runs in a goroutine of its own: no require here
						return false
					}
					return info.Published == int64(i+1)
				}, schedWait, 5*time.Millisecond, "tick %s", want)
				stop()
				require.NoError(t, <-done)
				info, err := schedule.Get(ctx, in, "dst")
				require.NoError(t, err)
				assert.Equal(t, want, info.LastTick.UTC().Format(time.RFC3339))
				assert.Zero(t, info.Skipped)
			}
			page, err := in.List(ctx, "jobs", redisdelay.ParkedGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
			require.NoError(t, err)
			var got []string
			for _, m := range page.Messages {
				got = append(got, m.Metadata[redisdelay.TickTimeMetadataKey])
			}
			var wantMeta []string
			for _, w := range c.want {
				wantMeta = append(wantMeta, utc(w).Format(time.RFC3339Nano))
			}
			assert.Equal(t, wantMeta, got)
		})
	}
}
