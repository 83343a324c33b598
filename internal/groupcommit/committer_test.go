// The package's tests run with the timers of Go before 1.23 (asynchronous channels), which a
// user's program gets when its go.mod names an older Go: CommitBy's reuse of a timer must hold
// there too (TestCommitByReusesItsTimerOnlyWhileItNeverFired checks that they are in force).
//go:debug asynctimerchan=1

package groupcommit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// errOutcomeUnknown is the error the Committers of these tests wrap when a call gives up while
// its round is under way.
var errOutcomeUnknown = errors.New("outcome unknown")

func TestGroupCommitReturnsWithinItsDeadlineWhenTheStoreHangs(t *testing.T) {
	f := newFakeStore(t) // never released: the store hangs and ignores its context
	g := New(f.store, errOutcomeUnknown)
	const calls, deadline, slack = 64, 200 * time.Millisecond, 100 * time.Millisecond
	out := make(chan outcome, calls)
	// The first calls hold every slot past the others' deadline, so that those give up pending.
	deadlines := map[int]time.Duration{}
	for id := range calls {
		deadlines[id] = deadline
		if id < smallInFlight {
			deadlines[id] = 2 * deadline
		}
		goCommit(g, id, 1, deadlines[id], out)
		if id < smallInFlight {
			waitEntered(t, f, 1)
		}
	}

	results := collect(t, out, calls)
	inRound := map[int]bool{}
	for _, ids := range roundsOf(t, f.recorded(), ones(calls)) {
		for _, id := range ids {
			inRound[id] = true
		}
	}
	require.NotEmpty(t, inRound)
	require.Less(t, len(inRound), calls, "some calls were still pending")
	for id, o := range results {
		require.LessOrEqual(t, o.elapsed, deadlines[id]+slack, "call %d", id)
		require.ErrorIs(t, o.err, context.DeadlineExceeded, "call %d", id)
		if inRound[id] {
			require.ErrorIs(t, o.err, errOutcomeUnknown, "call %d was in a round", id)
			require.NotErrorIs(t, o.err, ErrNotStored, "call %d was in a round", id)
		} else {
			require.ErrorIs(t, o.err, ErrNotStored, "call %d was pending", id)
			require.NotErrorIs(t, o.err, errOutcomeUnknown, "call %d was pending", id)
		}
	}
}

func TestGroupCommitLeaksNoSlotWhenCallsGiveUp(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	const calls = 64
	out := make(chan outcome, calls)
	// The rounds of the first smallInFlight calls outlive the others' deadline, so they give up
	// pending; then the first calls give up in flight, and their stuck rounds free their slots
	// at their deadline.
	for id := range smallInFlight {
		goCommit(g, id, 1, 200*time.Millisecond, out)
		waitEntered(t, f, 1)
	}
	for id := smallInFlight; id < calls; id++ {
		goCommit(g, id, 1, 50*time.Millisecond, out)
	}
	unknown := map[int]bool{}
	notStored := 0
	for id, o := range collect(t, out, calls) {
		switch {
		case errors.Is(o.err, errOutcomeUnknown):
			unknown[id] = true
		case errors.Is(o.err, ErrNotStored):
			notStored++
		default:
			t.Fatalf("call %d: %v", id, o.err)
		}
	}
	require.NotEmpty(t, unknown, "calls gave up in flight")
	require.NotZero(t, notStored, "calls gave up pending")
	f.open()

	const last = calls
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := g.Commit(ctx, messagesOf(last, 1))
	require.NoError(t, err)
	require.Less(t, time.Since(start), time.Second)

	sizes := ones(calls + 1)
	rounds := roundsOf(t, f.recorded(), sizes)
	require.Equal(t, []int{last}, rounds[len(rounds)-1])
	for _, ids := range rounds[:len(rounds)-1] {
		for _, id := range ids {
			require.True(t, unknown[id], "call %d returned ErrNotStored but was stored", id)
		}
	}
}

func TestGroupCommitReturnsOnceItsRoundIsStoredWhileOtherCallsKeepArriving(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	const waves, perWave = 8, 5
	out := make(chan outcome, maxInFlight+waves*perWave)
	next := 0
	for ; next < maxInFlight; next++ {
		goCommit(g, next, overlapAt, time.Minute, out)
		waitEntered(t, f, 1)
	}
	for r := range waves {
		// New calls arrive while every slot is busy, so they wait in pending.
		for range perWave {
			goCommit(g, next, overlapAt, time.Minute, out)
			next++
		}
		eventually(t, "new calls pending", func() bool { return pendingCalls(g) == perWave })

		f.finish(r, nil)
		waitEntered(t, f, 1) // the freed slot starts a round of the pending calls
		want := roundsOf(t, f.recorded()[r:r+1], sized(next, overlapAt))[0]
		got := collect(t, out, len(want))
		for _, id := range want {
			require.Contains(t, got, id, "call %d of stored round %d has not returned", id, r)
			require.NoError(t, got[id].err)
		}
		require.Empty(t, out, "a call returned before its round was stored")
	}
}

func TestGroupCommitGivesARoundsStoreErrorToEveryCallOfThatRoundOnly(t *testing.T) {
	f := newFakeStore(t)
	f.results = map[int]error{
		0:           errors.New("round 0 failed"),
		2:           errors.New("round 2 failed"),
		maxInFlight: errors.New("first combined round failed"),
	}
	g := New(f.store, errOutcomeUnknown)
	const calls = 40
	out := fillSlots(t, g, f, calls)
	f.open()

	results := collect(t, out, calls)
	rounds := roundsOf(t, f.recorded(), sized(calls, overlapAt))
	require.Greater(t, len(rounds[maxInFlight]), 1, "the round after the first ones combines calls")
	for r, ids := range rounds {
		for _, id := range ids {
			require.Equal(t, f.results[r], results[id].err, "call %d of round %d", id, r)
		}
	}
}

func TestGroupCommitStoresARoundUnderTheLatestDeadlineOfItsCallsAndNoCallsCancellation(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	out := make(chan outcome, maxInFlight+2)
	for id := range maxInFlight {
		goCommit(g, id, overlapAt, time.Minute, out)
		waitEntered(t, f, 1)
	}
	// Two calls wait for the same round: one that gives up early, one with a later deadline.
	early, giveUp := context.WithTimeout(context.Background(), time.Minute)
	defer giveUp()
	go func() {
		_, err := g.Commit(early, messagesOf(maxInFlight, overlapAt))
		out <- outcome{id: maxInFlight, err: err}
	}()
	eventually(t, "the early call pending", func() bool { return pendingCalls(g) == 1 })
	goCommit(g, maxInFlight+1, overlapAt, 2*time.Minute, out)
	eventually(t, "the late call pending", func() bool { return pendingCalls(g) == 2 })
	f.finish(0, nil)
	waitEntered(t, f, 1)
	require.Equal(t, [][]int{{maxInFlight, maxInFlight + 1}}, roundsOf(t, f.recorded()[maxInFlight:], map[int]int{maxInFlight: overlapAt, maxInFlight + 1: overlapAt}))

	giveUp()
	gaveUp := collect(t, out, 2) // call 0, whose round was stored, and the early call
	require.ErrorIs(t, gaveUp[maxInFlight].err, errOutcomeUnknown)
	require.ErrorIs(t, gaveUp[maxInFlight].err, context.Canceled)
	f.mu.Lock()
	ctx := f.ctxs[maxInFlight]
	f.mu.Unlock()
	require.NoError(t, ctx.Err(), "one caller giving up does not abort the round")
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.Greater(t, time.Until(deadline), time.Minute, "the round has the late call's deadline")

	f.finish(maxInFlight, nil)
	late := collect(t, out, 1)
	require.NoError(t, late[maxInFlight+1].err)
}

// A Committer is idle only while no call is pending and no round is under way.
func TestGroupCommitIsIdleOnlyWithNothingPendingOrUnderWay(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	require.True(t, g.Idle(), "a new Committer")
	out := make(chan outcome, smallInFlight+1)
	for id := range smallInFlight {
		goCommit(g, id, 1, time.Minute, out)
		waitEntered(t, f, 1)
	}
	require.False(t, g.Idle(), "rounds under way")
	goCommit(g, smallInFlight, 1, time.Minute, out)
	eventually(t, "the last call pending", func() bool { return pendingCalls(g) == 1 })
	f.finish(0, nil)
	f.finish(1, nil)
	require.NoError(t, collect(t, out, 2)[0].err)
	waitEntered(t, f, 1)
	require.False(t, g.Idle(), "the last call's round under way")
	f.open()
	require.NoError(t, collect(t, out, 1)[smallInFlight].err)
	eventually(t, "idle once every round gave its result", g.Idle)
}

// The goroutines that run rounds serve one round after another, and end once the Committer is
// idle: a dropped Committer leaks none, even when calls gave up or a round hung past its
// deadline.
func TestGroupCommitHoldsNoGoroutineOnceIdle(t *testing.T) {
	f := newFakeStore(t)
	g := New(f.store, errOutcomeUnknown)
	out := make(chan outcome, 3*maxInFlight+1)
	goCommit(g, 0, 1, 50*time.Millisecond, out)
	waitEntered(t, f, 1) // round 0 hangs past its call's deadline
	require.ErrorIs(t, collect(t, out, 1)[0].err, errOutcomeUnknown)
	for id := 1; id <= 3*maxInFlight; id++ {
		goCommit(g, id, overlapAt, time.Minute, out)
	}
	for i := 1; i <= 3*maxInFlight; i++ {
		f.finish(i, nil)
	}
	for id, o := range collect(t, out, 3*maxInFlight) {
		require.NoError(t, o.err, "call %d", id)
	}
	eventually(t, "the runners but the hung one ended", func() bool { return runners(g) == 1 })
	f.open()
	eventually(t, "every runner ended", func() bool { return runners(g) == 0 })
	require.True(t, g.Idle())
}

// A call that waited with CommitBy and got its result before its deadline keeps its timer for
// a later call, which waits for its own deadline; a call whose timer fired drops it. Neither
// ends a later call early.
func TestCommitByReusesItsTimerOnlyWhileItNeverFired(t *testing.T) {
	require.Equal(t, 1, cap(time.NewTimer(time.Hour).C), "timers of Go before 1.23 (see go:debug above)")
	f := newFakeStore(t)
	f.open()
	g := New(f.store, errOutcomeUnknown)
	for i := range 200 {
		// Every fourth call has a deadline that a round can outlive: its timer may fire.
		timeout := time.Minute
		if i%4 == 0 {
			timeout = time.Duration(i%3) * time.Millisecond
		}
		_, err := g.CommitBy(context.Background(), time.Now().Add(timeout), messagesOf(i, 1))
		if timeout == time.Minute {
			require.NoError(t, err, "call %d", i)
		} else if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
		}
	}
}
