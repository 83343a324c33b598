package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
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

// TestSchedulerPublishesDaylightSavingTicks runs a Scheduler on the test kit's virtual clock
// through each daylight-saving case, from its start to its last promised tick: exactly the
// promised ticks are published, each handed out at its instant and carrying it as its tick
// time. The clock moves only from tick to tick, so the outcome does not depend on the machine's
// speed.
func TestSchedulerPublishesDaylightSavingTicks(t *testing.T) {
	for _, c := range dstCases {
		t.Run(c.name, func(t *testing.T) {
			q := redisdelaytest.New(t, redisdelaytest.Options{Start: c.from})
			q.Consume("jobs", "app")
			s := runOnKit(t, q)
			_, err := s.Put(context.Background(), schedule.Schedule{Name: "dst", Spec: c.spec, TimeZone: c.tz, Topic: "jobs"})
			require.NoError(t, err)

			// To the last tick's message, and past its tick message (due PrearmedTickDelayForTest
			// later), which the Scheduler records as published.
			q.AdvanceTo(utc(c.want[len(c.want)-1]).Add(schedule.PrearmedTickDelayForTest))

			var at, tickTimes, wantTickTimes []string
			for _, d := range q.Received("app") {
				at = append(at, d.At.UTC().Format(time.RFC3339))
				tickTimes = append(tickTimes, d.Metadata[redisdelay.TickTimeMetadataKey])
			}
			for _, w := range c.want {
				wantTickTimes = append(wantTickTimes, utc(w).Format(time.RFC3339Nano))
			}
			assert.Equal(t, c.want, at, "handed out at")
			assert.Equal(t, wantTickTimes, tickTimes, "tick times")
			info, err := schedule.Get(context.Background(), q.Inspector(), "dst")
			require.NoError(t, err)
			assert.Equal(t, int64(len(c.want)), info.Published)
			assert.Zero(t, info.Skipped)
		})
	}
}

// runOnKit makes a Scheduler on the test kit's Publisher, with one subscription (a case has one
// schedule), and runs it until the test ends.
func runOnKit(t *testing.T, q *redisdelaytest.Queue) *schedule.Scheduler {
	s, err := schedule.New(schedule.Config{Publisher: q.Publisher(), Concurrency: 1}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
		assert.NoError(t, s.Close())
	})
	return s
}
