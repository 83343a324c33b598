package groupcommit

// This file owns the callers' side: the Committer, its pending calls, and what a call returns.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrNotStored is wrapped, with the context's error, by a Commit whose context ended before its
// items were taken into a round: nothing of them was sent, so committing them again is safe.
var ErrNotStored = errors.New("messages were not stored")

// StoreFunc stores the items of one round: all of them or none. It returns one outcome byte per
// item, in the order of items, which it must not modify (with one call in the round, they are
// that call's slice). ctx carries the values of the round's first call and the latest deadline
// among its calls, and no call's cancellation.
type StoreFunc[T any] func(ctx context.Context, items []T) (outcomes string, err error)

// Committer owns the commit calls of one topic partition that wait to be stored and the rounds
// under way, and combines concurrent calls into one store call per round. Each call's items go
// whole and contiguous, in call order, into exactly one round, so each call stays atomic. A round
// starts when a slot is free (smallInFlight, or maxInFlight while overlapAt items wait) and its
// share of the active callers is pending (see target), or lingerMax after it began waiting for
// them. A slot belongs to a round, never to a caller: the round runs on a goroutine of the
// Committer's (a runner, which serves round after round while calls keep coming, and ends once
// the Committer is idle) and, when its store call returns, gives its result to its calls and
// starts the next round from the calls still pending. It is safe for concurrent use.
type Committer[T any] struct {
	store StoreFunc[T]
	// outcomeUnknown is wrapped by a call whose context ended while its round was under way.
	outcomeUnknown error

	mu           sync.Mutex
	pending      []*call[T] // in call order
	calls        sync.Pool  // of *call[T] whose result was received, to reuse
	pendingItems int        // items of the pending calls
	inFlight     int        // rounds under way
	// callsInFlight is how many calls the rounds under way hold.
	callsInFlight int
	// target is how many calls a round waits for, set when a round finishes: the active
	// calls then (those of the rounds under way, its own, whose callers are about to come
	// back, and those pending), divided among smallInFlight rounds, rounded up. Closed loops
	// of publishers so settle into smallInFlight cohorts that alternate; a lone caller's
	// target is 1, so it never waits. Until a round has finished, it is 0.
	target int
	// lingered is set when lingerMax has passed since pending calls began to wait for
	// target (the timer linger sets it) and cleared when a round starts.
	lingered bool
	// linger is created once and reset; lingerArmed says it is armed, to fire at lingerAt.
	linger      *time.Timer
	lingerArmed bool
	lingerAt    time.Time
	lingerMax   time.Duration // lingerMax unless a test sets it
	// work hands rounds to the idleRunners runners parked on it (see runner); a nil round
	// ends a runner. Its buffer holds maxInFlight, the most runners that park.
	work        chan []*call[T]
	idleRunners int
	runners     int // the runner goroutines, idle or not
}

// call is one commit call.
type call[T any] struct {
	ctx   context.Context
	items []T
	taken bool        // in a round; guarded by Committer.mu
	done  chan result // buffered; receives the call's part of its round's result
}

// result is a commit call's result: the outcomes of its items, or the error of its round.
type result struct {
	outcomes string
	err      error
}

// New returns a Committer that stores each round with store. store gets the items of the
// round's calls, in call order, and a context whose deadline is the latest of theirs; it must
// store all of them or none, and return one outcome byte per item. outcomeUnknown is the error
// that a Commit wraps when its context ends while its round is under way.
func New[T any](store StoreFunc[T], outcomeUnknown error) *Committer[T] {
	return &Committer[T]{store: store, outcomeUnknown: outcomeUnknown, lingerMax: lingerMax, work: make(chan []*call[T], maxInFlight)}
}

// Commit stores items in a round shared with concurrent calls and returns within ctx's
// deadline. It returns the round's result (one outcome byte per item, or the store error) when
// the round finished first. When ctx ends before the call was taken into a round, it returns an
// error wrapping ErrNotStored and ctx.Err(), and items are never stored. When ctx ends while the
// round is under way, it returns an error wrapping New's outcomeUnknown and ctx.Err(): items are
// then either all stored or none is. The cancellation of ctx never aborts a round under way,
// since other calls share it. items must not be modified once passed, even after Commit
// returned: a round of this call alone stores the slice itself, not a copy, and may go on after
// an outcome-unknown return.
func (g *Committer[T]) Commit(ctx context.Context, items []T) (string, error) {
	c, _ := g.calls.Get().(*call[T])
	if c == nil {
		c = &call[T]{done: make(chan result, 1)}
	}
	c.ctx, c.items = ctx, items
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.pendingItems += len(items)
	g.startRounds()
	g.mu.Unlock()

	select {
	case r := <-c.done:
		// The round let go of c when it sent r: c serves another call.
		*c = call[T]{done: c.done}
		g.calls.Put(c)
		return r.outcomes, r.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.taken {
		if i := slices.Index(g.pending, c); i >= 0 {
			g.pending = slices.Delete(g.pending, i, i+1)
			g.pendingItems -= len(c.items)
			g.retireIfIdle()
		}
		return "", fmt.Errorf("%w: %w", ErrNotStored, ctx.Err())
	}
	select {
	case r := <-c.done: // the round finished as ctx ended
		return r.outcomes, r.err
	default:
		return "", fmt.Errorf("%w: %w", g.outcomeUnknown, ctx.Err())
	}
}

// Idle reports whether g has no call pending and no round under way. A Committer that is idle
// holds nothing: it may be dropped, and a call on it still works.
func (g *Committer[T]) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isIdle()
}
