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
