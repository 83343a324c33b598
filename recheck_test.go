package redisdelay

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRecheckWaitIsTheTimeToTheNextInstantOfThePhase checks the rule on a 10 s interval: the
// wait ends at the next instant a whole number of intervals from the phase, and is in
// (0, interval], also before the phase.
func TestRecheckWaitIsTheTimeToTheNextInstantOfThePhase(t *testing.T) {
	const interval = 10 * time.Second
	phase := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name string
		now  time.Duration // since phase
		want time.Duration
	}{
		{"at the phase", 0, interval},
		{"just after the phase", time.Nanosecond, interval - time.Nanosecond},
		{"within the interval", 3 * time.Second, 7 * time.Second},
		{"just before the next instant", interval - time.Nanosecond, time.Nanosecond},
		{"intervals later", 25 * time.Second, 5 * time.Second},
		{"before the phase", -4 * time.Second, 4 * time.Second},
		{"intervals before the phase", -32 * time.Second, 2 * time.Second},
	} {
		assert.Equal(t, tc.want, recheckWait(phase.Add(tc.now), phase, interval), tc.name)
	}
}

// TestIdleRechecksOfSubscriptionsThatClaimedTogetherAreSpreadOverTheInterval simulates 2,000
// idle subscriptions that claim in the same instant, when their consumers start or when a
// wake-up on all topics wakes them after some idle time, and follows their rechecks for
// 4 intervals: no second carries more than twice the average number of rechecks, no wait is
// longer than RecheckInterval, and an idle subscription rechecks once per interval.
func TestIdleRechecksOfSubscriptionsThatClaimedTogetherAreSpreadOverTheInterval(t *testing.T) {
	const (
		subs      = 2000
		interval  = DefaultRecheckInterval
		roundTrip = 2 * time.Millisecond // from the end of a sleep to the next one
		intervals = 4
	)
	start := time.Unix(1_000_000, 0)
	phases := make([]time.Time, subs)
	for i := range phases {
		phases[i] = newRecheckPhase(start, interval)
	}
	for _, tc := range []struct {
		name    string
		claimAt time.Time // when they all claim, then sleep
	}{
		{"consumers started together", start.Add(roundTrip)},
		{"woken together after idle time", start.Add(37*time.Second + 300*time.Millisecond)},
	} {
		buckets := make([]int, intervals*int(interval/time.Second))
		end := tc.claimAt.Add(intervals * interval)
		total, offBeat := 0, 0
		var shortest, longest time.Duration = interval, 0
		for _, phase := range phases {
			var last time.Time
			for now := tc.claimAt; ; now = now.Add(roundTrip) {
				wait := recheckWait(now, phase, interval)
				shortest, longest = min(shortest, wait), max(longest, wait)
				now = now.Add(wait)
				if !now.Before(end) {
					break
				}
				if !last.IsZero() && now.Sub(last) != interval {
					offBeat++
				}
				last = now
				buckets[int(now.Sub(tc.claimAt)/time.Second)]++
				total++
			}
		}
		assert.Positive(t, shortest, tc.name)
		assert.LessOrEqual(t, longest, interval, "%s: no wait is longer than RecheckInterval", tc.name)
		assert.Zero(t, offBeat, "%s: rechecks of an idle subscription not one interval apart", tc.name)
		assert.InDelta(t, subs*intervals, total, subs, "%s: one recheck per subscription and interval", tc.name)
		average := float64(total) / float64(len(buckets))
		busiest := slices.Max(buckets)
		t.Logf("%s: %d rechecks, %.0f a second on average, %d in the busiest second", tc.name, total, average, busiest)
		assert.LessOrEqual(t, float64(busiest), 2*average, "%s: the busiest second holds %d rechecks, the average is %.0f", tc.name, busiest, average)
	}
}
