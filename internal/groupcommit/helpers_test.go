package groupcommit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
// sends the outcome to out. Calls of an odd id wait with CommitBy, the others with a context
// (Commit): every test that commits through goCommit holds for both.
func goCommit(g *Committer[string], id, n int, timeout time.Duration, out chan<- outcome) {
	go func() {
		start := time.Now()
		var err error
		if id%2 == 1 {
			_, err = g.CommitBy(context.Background(), start.Add(timeout), messagesOf(id, n))
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err = g.Commit(ctx, messagesOf(id, n))
		}
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

// runners returns how many runner goroutines g has, idle or not.
func runners(g *Committer[string]) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runners
}
