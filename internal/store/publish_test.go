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

// TestACallCarriesTheHorizonOnlyWithAMessageThatMayReachTheCompactTier: a message due less
// than the horizon after the call never reaches the compact tier, so a call of such messages
// leaves the horizon out (publish_to then does not read it); a plain message due at least the
// horizon later, or at a time of the client's clock, takes it in. Keyed messages and batch
// items never go to the compact tier; the fence goes with every call that has one.
func TestACallCarriesTheHorizonOnlyWithAMessageThatMayReachTheCompactTier(t *testing.T) {
	sent := time.Now()
	call := Call{TTL: time.Minute, Horizon: time.Hour}
	soon := Outgoing{Delay: time.Hour - time.Microsecond}
	assert.Equal(t, int64(60_000), call.ttlArg([]Outgoing{{}, soon}, sent))
	assert.Equal(t, "60000>3600000000", call.ttlArg([]Outgoing{soon, {Delay: time.Hour}}, sent))
	assert.Equal(t, "60000>3600000000", call.ttlArg([]Outgoing{{At: sent.Add(time.Second)}}, sent))
	assert.Equal(t, int64(60_000), call.ttlArg([]Outgoing{{Delay: 2 * time.Hour, KeySpec: KeySpec(KeepExisting, 0, 0, "k")}}, sent))
	assert.Equal(t, "60000>1036800000000", Call{TTL: time.Minute, Horizon: 100 * 24 * time.Hour}.ttlArg([]Outgoing{{Delay: 13 * 24 * time.Hour}}, sent), "at most MaxHorizon")
	fenced := Call{TTL: time.Minute, Horizon: time.Hour, NotAfterUs: 1_700_000_000_000_000}
	assert.Equal(t, "60000<1700000000000000", fenced.ttlArg([]Outgoing{soon}, sent))
	assert.Equal(t, "60000>3600000000<1700000000000000", fenced.ttlArg([]Outgoing{{Delay: time.Hour}}, sent))
	assert.Equal(t, int64(60_000), Call{TTL: time.Minute}.ttlArg([]Outgoing{{Delay: time.Hour}}, sent), "no tier")
}
