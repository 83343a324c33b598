package groupcommit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGroupCommitCombinesConcurrentCallsIntoWholeRounds(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	const calls = 100
	sizes := map[int]int{}
	out := make(chan outcome, calls)
	for id := range calls {
		sizes[id] = (id%10 + 1) * 10
		if id < maxInFlight {
			sizes[id] = overlapAt // enough to start a round while others are under way
		}
		if id == calls/2 {
			sizes[id] = maxCombinedItems + 500
		}
		goCommit(g, id, sizes[id], time.Minute, out)
		if id < maxInFlight {
			waitEntered(t, f, 1) // each of the first calls fills a slot alone
		} else {
			eventually(t, fmt.Sprintf("call %d pending", id), func() bool { return pendingCalls(g) == id-maxInFlight+1 })
		}
	}
	f.open()

	for id, o := range collect(t, out, calls) {
		require.NoError(t, o.err, "call %d", id)
	}
	rounds := roundsOf(t, f.recorded(), sizes)
	require.Less(t, len(rounds), calls, "concurrent calls share store calls")
	stored := 0
	for r, ids := range rounds {
		stored += len(ids)
		if n := len(f.recorded()[r]); n > maxCombinedItems {
			require.Len(t, ids, 1, "round %d holds %d messages from more than one call", r, n)
		}
		for k := 1; k < len(ids); k++ {
			require.Equal(t, ids[k-1]+1, ids[k], "round %d is not in call order: %v", r, ids)
		}
	}
	require.Equal(t, calls, stored, "every call is stored in exactly one round")
}

func TestGroupCommitRunsAtMostMaxInFlightStoreCallsAtOnce(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	const calls = 64
	out := fillSlots(t, g, f, calls)
	require.Len(t, f.recorded(), maxInFlight, "no round starts while maxInFlight are under way")
	f.open()

	for id, o := range collect(t, out, calls) {
		require.NoError(t, o.err, "call %d", id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, maxInFlight, f.maxActive)
}

// A store call that does not return (a Redis that does not answer, with a client that does not
// bound calls by their context) holds its slot only until its round's deadline: the next round
// starts then, while the stuck one finishes in the background.
func TestGroupCommitFreesAStuckRoundsSlotAtItsDeadline(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	out := make(chan outcome, 2)
	goCommit(g, 0, 1, 100*time.Millisecond, out)
	waitEntered(t, f, 1) // round 0 never returns until the test ends
	stuck := collect(t, out, 1)[0]
	require.ErrorIs(t, stuck.err, errOutcomeUnknown)
	require.ErrorIs(t, stuck.err, context.DeadlineExceeded)

	goCommit(g, 1, 1, time.Minute, out)
	waitEntered(t, f, 1)
	f.finish(1, nil)
	next := collect(t, out, 1)[1]
	require.NoError(t, next.err, "the call after the stuck round is stored in a round of its own")
	require.Equal(t, [][]int{{1}}, roundsOf(t, f.recorded()[1:], map[int]int{1: 1}))
}

// Calls of fewer than overlapAt messages in all run in at most smallInFlight rounds at once:
// the calls arriving meanwhile wait and share the next round.
func TestGroupCommitRunsSmallInFlightRoundsForFewMessages(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	const calls = 20 // of one message: fewer than overlapAt
	out := make(chan outcome, calls)
	for id := range smallInFlight {
		goCommit(g, id, 1, time.Minute, out)
		waitEntered(t, f, 1)
	}
	for id := smallInFlight; id < calls; id++ {
		goCommit(g, id, 1, time.Minute, out)
	}
	eventually(t, "every later call pending", func() bool { return pendingCalls(g) == calls-smallInFlight })
	require.Len(t, f.recorded(), smallInFlight, "no further round while fewer than overlapAt messages wait")
	f.open()
	for id, o := range collect(t, out, calls) {
		require.NoError(t, o.err, "call %d", id)
	}
	rounds := roundsOf(t, f.recorded(), ones(calls))
	require.Len(t, rounds, smallInFlight+1)
	for id := range smallInFlight {
		require.Equal(t, []int{id}, rounds[id])
	}
	require.ElementsMatch(t, ids(smallInFlight, calls), rounds[smallInFlight], "the waiting calls share one round")
}

// ids returns from, from+1, …, to-1.
func ids(from, to int) []int {
	var out []int
	for id := from; id < to; id++ {
		out = append(out, id)
	}
	return out
}

// startCohorts brings g to where a round waits for the callers of the last one: calls 0 and 1
// run in rounds 0 and 1, calls 2 and 3 in round 2, started when round 0 finished. Call 0's
// caller then publishes again (call 4) and round 1 finishes: of the 4 active calls (round 1's,
// round 2's and call 4), a round waits for its share of 2 (smallInFlight rounds), so call 4
// waits for call 1's caller to come back.
func startCohorts(t *testing.T, g *Committer[string], f *fakeStore, out chan outcome) time.Time {
	t.Helper()
	require.Equal(t, 2, smallInFlight, "the steps below assume two rounds at once")
	goCommit(g, 0, 1, time.Minute, out)
	waitEntered(t, f, 1)
	goCommit(g, 1, 1, time.Minute, out)
	waitEntered(t, f, 1)
	goCommit(g, 2, 1, time.Minute, out)
	goCommit(g, 3, 1, time.Minute, out)
	eventually(t, "calls 2 and 3 pending", func() bool { return pendingCalls(g) == 2 })
	f.finish(0, nil)
	require.NoError(t, collect(t, out, 1)[0].err)
	waitEntered(t, f, 1) // round 2: calls 2 and 3, its share of the 4 active calls
	goCommit(g, 4, 1, time.Minute, out)
	eventually(t, "call 4 pending", func() bool { return pendingCalls(g) == 1 })
	f.finish(1, nil)
	finished := time.Now()
	require.NoError(t, collect(t, out, 1)[1].err)
	return finished
}

// After a round, the next one waits for its share of the active calls, so that the callers the
// round woke up join the calls that waited and the two cohorts keep their size.
func TestGroupCommitWaitsForTheCallersOfTheLastRound(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	g.lingerMax = time.Minute // only the callers' return starts the next round
	out := make(chan outcome, 6)
	startCohorts(t, g, f, out)
	// Round 1 gave its result only after it had started what rounds it would: call 4 is still
	// pending then, not on its way to the store.
	require.Equal(t, 1, pendingCalls(g), "call 4 waits for call 1's caller to come back")
	require.Len(t, f.recorded(), 3)

	goCommit(g, 5, 1, time.Minute, out) // call 1's caller publishes again
	waitEntered(t, f, 1)
	f.open()
	require.Len(t, collect(t, out, 4), 4)
	rounds := roundsOf(t, f.recorded(), ones(6))
	require.Len(t, rounds, 4)
	require.Equal(t, [][]int{{0}, {1}}, rounds[:2])
	require.ElementsMatch(t, []int{2, 3}, rounds[2])
	require.Equal(t, []int{4, 5}, rounds[3], "the waiting call and the returning caller share a round")
}

// A caller that does not come back delays the next round by lingerMax only.
func TestGroupCommitLingersAtMostLingerMax(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	g.lingerMax = 50 * time.Millisecond
	out := make(chan outcome, 5)
	finished := startCohorts(t, g, f, out)
	f.open()
	got := collect(t, out, 3)
	require.NoError(t, got[4].err)
	waited := time.Since(finished)
	require.GreaterOrEqual(t, waited, 50*time.Millisecond, "call 4 waited for call 1's caller")
	require.Less(t, waited, 2*time.Second, "but no longer than about lingerMax")
	rounds := roundsOf(t, f.recorded(), ones(5))
	require.Equal(t, []int{4}, rounds[3])
}

// A round's context carries the first call's values and the latest of the calls' deadlines
// (none when one call has none), ends with DeadlineExceeded at that deadline, and its end
// frees the round's slot once, however often it ends.
func TestRoundContextCarriesTheFirstCallsValuesAndTheLatestDeadline(t *testing.T) {
	type key struct{}
	g := New(func(context.Context, []int) (string, error) { return "", nil }, errOutcomeUnknown)
	now := time.Now()
	first, cancelFirst := context.WithDeadline(context.WithValue(context.Background(), key{}, "first"), now.Add(time.Hour))
	defer cancelFirst()
	later, cancelLater := context.WithDeadline(context.Background(), now.Add(2*time.Hour))
	defer cancelLater()

	ctx := newRoundContext(g, []*call[int]{{ctx: first, deadline: now.Add(time.Hour)}, {ctx: later, deadline: now.Add(2 * time.Hour)}})
	require.Equal(t, "first", ctx.Value(key{}))
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, now.Add(2*time.Hour), deadline)
	cancelFirst()
	require.NoError(t, ctx.Err(), "a call's cancellation does not reach the round")

	none := newRoundContext(g, []*call[int]{{ctx: later, deadline: now.Add(2 * time.Hour)}, {ctx: context.Background()}})
	_, ok = none.Deadline()
	require.False(t, ok, "a call without a deadline leaves the round without one")

	g.mu.Lock()
	g.inFlight, g.callsInFlight = 1, 2
	g.mu.Unlock()
	ctx.expire()
	ctx.end(context.Canceled)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Done not closed once the context ended")
	}
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the first end is the one it keeps")
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, 0, g.inFlight, "the slot freed once")
	require.Equal(t, 0, g.callsInFlight)
}
