package redisdelay

import (
	"math/rand/v2"
	"time"
)

// An idle subscription asks Redis again every RecheckInterval, a safety net for lost wake-ups.
// Subscriptions that started together, or that a wake-up on all their topics woke together,
// would recheck together, every interval, in bursts that a jittered interval spreads only
// slowly. So each partition consumer rechecks at instants of its own: a whole number of
// intervals after a phase drawn at random when it starts. The rechecks of many subscriptions
// are then spread evenly over the interval from the first one on, whatever made them claim
// together, and an idle one rechecks exactly every interval.

// newRecheckPhase returns the instant from which a partition consumer that starts at start
// counts its rechecks: drawn uniformly from [start, start+interval). interval must be > 0.
func newRecheckPhase(start time.Time, interval time.Duration) time.Time {
	return start.Add(rand.N(interval))
}

// recheckWait is how long an idle subscription sleeps, at now, before it asks Redis again:
// the time until the next instant a whole number of intervals after phase (or before it), in
// (0, interval]. interval must be > 0.
func recheckWait(now, phase time.Time, interval time.Duration) time.Duration {
	past := now.Sub(phase) % interval
	if past < 0 {
		past += interval
	}
	return interval - past
}
