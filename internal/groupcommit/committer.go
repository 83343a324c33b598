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
	ctx context.Context
	// deadline is when the caller gives up: its context's (Commit) or the one it named
	// (CommitBy); zero for none.
	deadline time.Time
	items    []T
	taken    bool        // in a round; guarded by Committer.mu
	done     chan result // buffered; receives the call's part of its round's result
	// timer is CommitBy's, kept with the call for its next use while it never fired.
	timer *time.Timer
}

// ended reports whether c's caller has given up (or is about to, its deadline passed).
func (c *call[T]) ended() bool {
	return c.ctx.Err() != nil || !c.deadline.IsZero() && !time.Now().Before(c.deadline)
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
	deadline, _ := ctx.Deadline()
	c := g.enqueue(ctx, deadline, items)
	select {
	case r := <-c.done:
		g.recycle(c)
		return r.outcomes, r.err
	case <-ctx.Done():
	}
	return g.abandon(c, ctx.Err())
}

// CommitBy is Commit for a caller that gives up at deadline instead of when a context ends:
// values gives the round the values that a call's context gives it (see StoreFunc), and is
// never cancelled. At the deadline it returns what Commit returns when its context reaches its
// deadline, wrapping context.DeadlineExceeded. It allocates no context of its own, and no
// timer once its call has one: a call keeps its timer while it never fired.
func (g *Committer[T]) CommitBy(values context.Context, deadline time.Time, items []T) (string, error) {
	c := g.enqueue(values, deadline, items)
	if c.timer == nil {
		c.timer = time.NewTimer(time.Until(deadline))
	} else {
		c.timer.Reset(time.Until(deadline))
	}
	select {
	case r := <-c.done:
		if !c.timer.Stop() {
			// It fired: with the timers of Go before 1.23 its value may still be on its way,
			// so it serves no later call.
			c.timer = nil
		}
		g.recycle(c)
		return r.outcomes, r.err
	case <-c.timer.C:
	}
	return g.abandon(c, context.DeadlineExceeded)
}

// enqueue adds a call of items, with ctx and deadline (see call), to the pending calls and
// starts the rounds that may start.
func (g *Committer[T]) enqueue(ctx context.Context, deadline time.Time, items []T) *call[T] {
	c, _ := g.calls.Get().(*call[T])
	if c == nil {
		c = &call[T]{done: make(chan result, 1)}
	}
	c.ctx, c.deadline, c.items = ctx, deadline, items
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.pendingItems += len(items)
	g.startRounds()
	g.mu.Unlock()
	return c
}

// recycle keeps c, whose result was received (the round let go of it when it sent it), for
// another call.
func (g *Committer[T]) recycle(c *call[T]) {
	*c = call[T]{done: c.done, timer: c.timer}
	g.calls.Put(c)
}

// abandon ends the wait of call c, whose caller gave up with err: ErrNotStored when no round
// took it (it leaves the pending calls), else the round's result if it arrived meanwhile, or
// the outcome-unknown error.
func (g *Committer[T]) abandon(c *call[T], err error) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.taken {
		if i := slices.Index(g.pending, c); i >= 0 {
			g.pending = slices.Delete(g.pending, i, i+1)
			g.pendingItems -= len(c.items)
			g.retireIfIdle()
		}
		return "", fmt.Errorf("%w: %w", ErrNotStored, err)
	}
	select {
	case r := <-c.done: // the round finished as the caller gave up
		return r.outcomes, r.err
	default:
		return "", fmt.Errorf("%w: %w", g.outcomeUnknown, err)
	}
}

// Idle reports whether g has no call pending and no round under way. A Committer that is idle
// holds nothing: it may be dropped, and a call on it still works.
func (g *Committer[T]) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isIdle()
}
