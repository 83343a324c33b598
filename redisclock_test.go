package redisdelay

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisClockNeverPutsADueTimeEarly: for random Redis clocks that run up to
// maxClockDriftPPM slower than the local one, and random claim replies that arrive some time
// after the claim read the Redis clock, the local time redisClock gives for a due time is one
// at which that Redis clock reads the due time or later; and it keeps the tighter sample.
func TestRedisClockNeverPutsADueTimeEarly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	for run := range 2000 {
		offsetUs := rng.Int64N(2_000_000) - 1_000_000
		ppm := rng.Int64N(maxClockDriftPPM + 1)
		// redisAt is the Redis clock at local time t: slower than the local clock by ppm.
		redisAt := func(t time.Time) int64 {
			el := t.Sub(base).Microseconds()
			return offsetUs + el - el*ppm/1_000_000
		}
		var rc redisClock
		local := base
		for range 20 {
			local = local.Add(time.Duration(rng.Int64N(50_000)) * time.Microsecond)
			read := redisAt(local)
			recv := local.Add(time.Duration(rng.Int64N(2_000)) * time.Microsecond)
			rc.observe(read, recv)
			local = recv
			due := read + rng.Int64N(5_000)
			at := rc.localAt(due)
			require.GreaterOrEqual(t, redisAt(at), due, "run %d: handed out early", run)
			assert.GreaterOrEqual(t, rc.leastAt(recv), read, "run %d: a looser sample kept", run)
		}
	}
}

// TestRedisClockBoundIsTight: with the Redis clock equal to the local one and instant replies,
// a due time maps to itself, but for the drift allowance.
func TestRedisClockBoundIsTight(t *testing.T) {
	now := time.Now()
	var rc redisClock
	rc.observe(now.UnixMicro(), now)
	due := now.Add(2 * time.Millisecond)
	at := rc.localAt(due.UnixMicro())
	assert.False(t, at.Before(due))
	assert.Less(t, at.Sub(due), 5*time.Microsecond)
}
