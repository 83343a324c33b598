package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// errOutcomeUnknown is the error the Committers of these tests wrap when a call gives up while
// its round is under way.
var errOutcomeUnknown = errors.New("outcome unknown")

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

// fakeStore is a store function for a Committer that records every batch and blocks each store
// call, ignoring its context, until the test releases it: one with finish, all with open.
type fakeStore struct {
	entered chan int // receives the index of each store call as it starts
	all     chan struct{}
	once    sync.Once

	mu        sync.Mutex
	batches   [][]string
	ctxs      []context.Context // the context of each store call
	releases  map[int]chan struct{}
	results   map[int]error // what store call i returns
	active    int
	maxActive int
}

func newFakeStore(t *testing.T) *fakeStore {
	f := &fakeStore{entered: make(chan int, 1024), all: make(chan struct{}), releases: map[int]chan struct{}{}}
	t.Cleanup(f.open) // rounds still hanging end with the test
	return f
}

func (f *fakeStore) store(ctx context.Context, batch []string) (string, error) {
	f.mu.Lock()
	i := len(f.batches)
	f.batches = append(f.batches, batch)
	f.ctxs = append(f.ctxs, ctx)
	release := f.release(i)
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	f.mu.Unlock()

	f.entered <- i
	select {
	case <-release:
	case <-f.all:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active--
	if err := f.results[i]; err != nil {
		return "", err
	}
	return strings.Repeat("s", len(batch)), nil
}

// release returns the channel that releases store call i; f.mu is held.
func (f *fakeStore) release(i int) chan struct{} {
	if f.releases[i] == nil {
		f.releases[i] = make(chan struct{})
	}
	return f.releases[i]
}

// finish makes store call i return err.
func (f *fakeStore) finish(i int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.results == nil {
		f.results = map[int]error{}
	}
	f.results[i] = err
	close(f.release(i))
}

// open releases every store call, now and later.
func (f *fakeStore) open() { f.once.Do(func() { close(f.all) }) }

// recorded returns the batches of the store calls so far, in the order they started.
func (f *fakeStore) recorded() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches[:len(f.batches):len(f.batches)]
}

// outcome is what one commit call returned and how long it took.
type outcome struct {
	id      int
	err     error
	elapsed time.Duration
}

// goCommit commits n messages of call id on g, with a deadline of timeout from its start, and
// sends the outcome to out.
func goCommit(g *Committer[string], id, n int, timeout time.Duration, out chan<- outcome) {
	go func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := g.Commit(ctx, messagesOf(id, n))
		out <- outcome{id: id, err: err, elapsed: time.Since(start)}
	}()
}

// collect receives n outcomes from out within five seconds, by call id.
func collect(t *testing.T, out <-chan outcome, n int) map[int]outcome {
	t.Helper()
	timeout := time.After(5 * time.Second)
	got := make(map[int]outcome, n)
	for len(got) < n {
		select {
		case o := <-out:
			got[o.id] = o
		case <-timeout:
			t.Fatalf("%d of %d calls returned within 5s", len(got), n)
		}
	}
	return got
}

// messagesOf returns n messages of call id; message j reads "id/j".
func messagesOf(id, n int) []string {
	msgs := make([]string, n)
	for j := range msgs {
		msgs[j] = fmt.Sprintf("%d/%d", id, j)
	}
	return msgs
}

// ones returns the sizes of calls 0 to n-1 that commit one message each.
func ones(n int) map[int]int { return sized(n, 1) }

// sized returns the sizes of calls 0 to n-1 that commit size messages each.
func sized(n, size int) map[int]int {
	sizes := make(map[int]int, n)
	for id := range n {
		sizes[id] = size
	}
	return sizes
}

// roundsOf checks that the messages of each call are in one batch only, whole, in order and
// contiguous, and returns the calls of each batch, in batch order.
func roundsOf(t *testing.T, batches [][]string, sizes map[int]int) [][]int {
	t.Helper()
	seen := map[int]bool{}
	rounds := make([][]int, len(batches))
	for r, batch := range batches {
		for k := 0; k < len(batch); {
			var id, j int
			_, err := fmt.Sscanf(batch[k], "%d/%d", &id, &j)
			require.NoError(t, err)
			require.False(t, seen[id], "call %d is in more than one round", id)
			seen[id] = true
			n := sizes[id]
			require.Positive(t, n, "call %d is unknown", id)
			require.LessOrEqual(t, k+n, len(batch), "call %d is cut at the end of round %d", id, r)
			for j := range n {
				require.Equal(t, fmt.Sprintf("%d/%d", id, j), batch[k+j], "round %d, message %d", r, k+j)
			}
			rounds[r] = append(rounds[r], id)
			k += n
		}
	}
	return rounds
}

// waitEntered waits up to a second for the next n store calls to start.
func waitEntered(t *testing.T, f *fakeStore, n int) {
	t.Helper()
	timeout := time.After(time.Second)
	for i := range n {
		select {
		case <-f.entered:
		case <-timeout:
			t.Fatalf("%d of %d store calls started within a second", i, n)
		}
	}
}

// eventually waits up to five seconds for cond, checking it every millisecond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// pendingCalls returns how many calls wait for a round.
func pendingCalls(g *Committer[string]) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// fillSlots starts calls commits of overlapAt messages each (enough to start a round while
// others are under way) with a minute's deadline and waits until the first maxInFlight rounds
// are in the store and every call is pending or in one of them.
func fillSlots(t *testing.T, g *Committer[string], f *fakeStore, calls int) chan outcome {
	t.Helper()
	out := make(chan outcome, calls)
	for id := range calls {
		goCommit(g, id, overlapAt, time.Minute, out)
	}
	waitEntered(t, f, maxInFlight)
	eventually(t, "every call pending or in a round", func() bool {
		return pendingCalls(g)+len(f.recorded()) == calls
	})
	return out
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
