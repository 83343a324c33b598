package store

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// delayArgUs reads the delay in µs that scheduleArg sends for m (a plain delay, or the delay
// before "<" of a clamped one).
func delayArgUs(t *testing.T, m Outgoing) int64 {
	t.Helper()
	v, isDelay := m.scheduleArg(time.Now()).(int64)
	if isDelay {
		return v
	}
	s, _, _ := strings.Cut(m.scheduleArg(time.Now()).(string), "<")
	us, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return us
}

func TestTheWaitForAScriptCallIsTakenOffTheDelay(t *testing.T) {
	from := time.Now().Add(-30 * time.Millisecond) // the message waited 30 ms for its round
	sent := delayArgUs(t, Outgoing{Delay: 100 * time.Millisecond, From: from})
	assert.LessOrEqual(t, sent, int64(70_000), "due 100 ms after From, not after the call")
	assert.Greater(t, sent, int64(0))

	clamped := Outgoing{Delay: 100 * time.Millisecond, From: from, Latest: time.Now().Add(time.Second)}
	assert.LessOrEqual(t, delayArgUs(t, clamped), int64(70_000), "a clamped delay counts from From too")
}

func TestADelayNeverGoesBelowZeroOrChangesWithoutFrom(t *testing.T) {
	passed := Outgoing{Delay: 10 * time.Millisecond, From: time.Now().Add(-30 * time.Millisecond)}
	assert.Equal(t, int64(0), delayArgUs(t, passed), "already due: at once")
	assert.Equal(t, int64(100_000), delayArgUs(t, Outgoing{Delay: 100 * time.Millisecond}), "no From: the whole delay")
	at := time.UnixMicro(1_700_000_000_000_000)
	assert.Equal(t, "@1700000000000000", Outgoing{At: at, Delay: time.Second, From: time.Now()}.scheduleArg(time.Now()), "an instant is left alone")
}
