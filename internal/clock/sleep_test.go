package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSleepPreciselyNeverSleepsLessThanAsked(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 250 * time.Microsecond, PreciseTail} {
		start := time.Now()
		SleepPrecisely(d)
		assert.GreaterOrEqual(t, time.Since(start), d)
	}
}

func TestSleepPreciselyTakesTheLastPreciseTailOfAWaitOnly(t *testing.T) {
	start := time.Now()
	SleepPrecisely(time.Hour)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, PreciseTail)
	assert.Less(t, took, 10*time.Second, "cut to PreciseTail, not an hour")
}

func TestASleeperSleepsAgainAndAgainNeverLessThanAsked(t *testing.T) {
	var s Sleeper
	defer s.Close()
	for _, d := range []time.Duration{time.Microsecond, 250 * time.Microsecond, PreciseTail, time.Hour, 100 * time.Microsecond} {
		start := time.Now()
		s.Sleep(d)
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, min(d, PreciseTail))
		assert.Less(t, took, 10*time.Second, "cut to PreciseTail")
	}
	s.Close()
	start := time.Now()
	s.Sleep(300 * time.Microsecond) // a new timerfd after Close
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Microsecond)
}
