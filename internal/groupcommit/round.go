package groupcommit

// This file owns the rounds: when one starts, which calls it takes, and how it runs.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

const (
	// maxCombinedItems bounds how many items of concurrent commit calls one round stores. A
	// single larger call still goes whole, alone.
	maxCombinedItems = 1000
	// maxInFlight is how many rounds per Committer may be under way at once while at least
	// overlapAt items wait.
	maxInFlight = 4
	// smallInFlight is how many rounds may be under way at once while fewer than overlapAt
	// items wait. Two let the callers of one round prepare their next messages while the
	// other round is in Redis, so that neither side idles: with 16 publishers of one message
	// each, on the 2-core benchmark machine, two alternating cohorts of about 8 published
	// 93k msg/s against 77k for one round of 16 at a time, at 4.1 instead of 3.7 µs of Redis
	// time per message; three or four cohorts made rounds of 5 and 3.7 messages, 82k and 80k
	// msg/s at 4.9 and 5.8 µs.
	smallInFlight = 2
	// overlapAt is how many items must wait before more than smallInFlight rounds run at
	// once. From it on, the fixed part of a script call (about 20 µs of Redis time) is small
	// against the round's messages, and more rounds in flight keep Redis busy while the client
	// prepares the next ones (batched publishing).
	overlapAt = 100
	// lingerMax bounds how long a round waits for its share of the active callers (see
	// Committer.target). Without that wait, each caller that comes back to an idle slot
	// would start a round of its own: 16 publishers of one message made rounds of 2–3
	// messages, at twice the Redis time per message. A caller that does not come back costs
	// the next round at most this long.
	lingerMax = 200 * time.Microsecond
)

// startRounds starts rounds of pending calls while a slot is free and target calls are pending,
// or lingerMax has passed since the first of them began to wait for the others; g.mu is held.
func (g *Committer[T]) startRounds() {
	for len(g.pending) > 0 {
		limit := smallInFlight
		if g.pendingItems >= overlapAt {
			limit = maxInFlight
		}
		if g.inFlight >= limit {
			return
		}
		if len(g.pending) < g.target && !g.lingered {
			g.armLinger()
			return
		}
		if round := g.takeRound(); len(round) > 0 {
			g.inFlight++
			g.callsInFlight += len(round)
			g.lingered = false
			if g.lingerArmed {
				g.linger.Stop()
				g.lingerArmed = false
			}
			g.dispatch(round)
		}
	}
	g.retireIfIdle() // the calls taken may all have given up
}

// dispatch hands round to an idle runner, or to a new one when none is idle. g.mu is held.
func (g *Committer[T]) dispatch(round []*call[T]) {
	if g.idleRunners > 0 {
		g.idleRunners--
		g.work <- round // never blocks: the buffer holds a place for each idle runner
		return
	}
	g.runners++
	go g.runner(round)
}

// runner runs round, then each round handed to it while it is idle (see dispatch). A runner
// keeps its goroutine, whose stack has grown to the store call's depth, for the next round:
// a goroutine per round cost the client a stack copy and a goroutine start per round. It ends
// when the Committer is idle (and tells the idle runners to end), or when maxInFlight runners
// are idle already.
func (g *Committer[T]) runner(round []*call[T]) {
	for round != nil {
		g.run(round)
		g.mu.Lock()
		if g.isIdle() || g.idleRunners >= maxInFlight {
			g.retireIfIdle()
			g.runners--
			g.mu.Unlock()
			return
		}
		g.idleRunners++
		g.mu.Unlock()
		round = <-g.work
	}
	g.mu.Lock()
	g.runners--
	g.mu.Unlock()
}

// isIdle reports whether g has no call pending and no round under way. g.mu is held.
func (g *Committer[T]) isIdle() bool {
	return len(g.pending) == 0 && g.inFlight == 0
}

// retireIfIdle ends the idle runners when g is idle, so that an idle Committer holds no
// goroutine. g.mu is held.
func (g *Committer[T]) retireIfIdle() {
	if !g.isIdle() {
		return
	}
	for ; g.idleRunners > 0; g.idleRunners-- {
		g.work <- nil
	}
}

// armLinger arms the linger timer unless it is armed. The Committer keeps one timer and
// resets it, since a timer per round costs the client an allocation and timer heap work. g.mu
// is held.
func (g *Committer[T]) armLinger() {
	if g.lingerArmed {
		return
	}
	g.lingerArmed = true
	g.lingerAt = time.Now().Add(g.lingerMax)
	if g.linger == nil {
		g.linger = time.AfterFunc(g.lingerMax, g.lingerFired)
		return
	}
	g.linger.Reset(g.lingerMax)
}

// lingerFired sets lingered and starts rounds. A firing that waited for g.mu while a round
// started (the timer is disarmed), or while the timer was armed again (lingerAt is ahead), is
// stale and does nothing.
func (g *Committer[T]) lingerFired() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.lingerArmed || time.Now().Before(g.lingerAt) {
		return
	}
	g.lingerArmed, g.lingered = false, true
	g.startRounds()
}

// takeRound removes from pending and returns the longest prefix of calls that holds at most
// maxCombinedItems items, or the first call alone when it holds more. Calls whose context
// already gave up are dropped on the way: their Commit returns ErrNotStored. g.mu is held.
func (g *Committer[T]) takeRound() []*call[T] {
	var round []*call[T]
	size, n := 0, 0
	for ; n < len(g.pending); n++ {
		c := g.pending[n]
		if c.ended() {
			g.pendingItems -= len(c.items)
			continue
		}
		if len(round) > 0 && size+len(c.items) > maxCombinedItems {
			break
		}
		c.taken = true
		round = append(round, c)
		size += len(c.items)
		g.pendingItems -= len(c.items)
	}
	g.pending = slices.Delete(g.pending, 0, n)
	return round
}

// run stores one round, frees the round's slot and starts the next round, then gives its result
// to the round's calls: the next round is on its way to Redis while they wake up. A store call
// that outlives the round's deadline (a Redis that does not answer, with a client that does not
// bound calls by their context) frees the slot at the deadline, so that it holds up the next
// rounds no longer than its calls wait; it finishes in the background and its calls have
// returned the outcome-unknown error by then.
func (g *Committer[T]) run(round []*call[T]) {
	ctx := newRoundContext(g, round)
	items := round[0].items
	if len(round) > 1 {
		n := 0
		for _, c := range round {
			n += len(c.items)
		}
		items = make([]T, 0, n)
		for _, c := range round {
			items = append(items, c.items...)
		}
	}
	var atDeadline *time.Timer
	if !ctx.deadline.IsZero() {
		atDeadline = time.AfterFunc(time.Until(ctx.deadline), ctx.expire)
	}
	outcomes, err := g.store(ctx, items)
	if atDeadline != nil {
		atDeadline.Stop()
	}
	ctx.end(context.Canceled)
	if err == nil && len(outcomes) != len(items) {
		err = fmt.Errorf("store returned %d outcomes for %d messages", len(outcomes), len(items))
	}
	for _, c := range round {
		r := result{err: err}
		if err == nil {
			r.outcomes, outcomes = outcomes[:len(c.items)], outcomes[len(c.items):]
		}
		c.done <- r
	}
}

// roundContext is the context of a round's store call: the values of the round's first call,
// the latest deadline among its calls (none when a call has none), and no call's cancellation,
// so that one caller giving up does not abort the others' round. It ends at that deadline
// (DeadlineExceeded) or once the store call returned (Canceled), and its end frees the round's
// slot and starts the next rounds. It does what context.WithDeadline over
// context.WithoutCancel, with a context.AfterFunc for the slot, did in one allocation and a
// channel, against five allocations and two timers per round.
type roundContext[T any] struct {
	values   context.Context
	deadline time.Time // zero: none
	g        *Committer[T]
	calls    int // the round's
	done     chan struct{}
	mu       sync.Mutex
	err      error // set once, when done is closed
}

func newRoundContext[T any](g *Committer[T], round []*call[T]) *roundContext[T] {
	ctx := &roundContext[T]{values: round[0].ctx, g: g, calls: len(round), done: make(chan struct{})}
	for _, c := range round {
		if c.deadline.IsZero() {
			ctx.deadline = time.Time{}
			break
		}
		if c.deadline.After(ctx.deadline) {
			ctx.deadline = c.deadline
		}
	}
	return ctx
}

// expire ends ctx at its deadline.
func (c *roundContext[T]) expire() { c.end(context.DeadlineExceeded) }

// end ends ctx with err, and frees the round's slot, unless it has ended.
func (c *roundContext[T]) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	c.mu.Unlock()
	g := c.g
	g.mu.Lock()
	g.inFlight--
	g.callsInFlight -= c.calls
	g.target = (g.callsInFlight + c.calls + len(g.pending) + smallInFlight - 1) / smallInFlight
	g.startRounds()
	g.mu.Unlock()
}

func (c *roundContext[T]) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }
func (c *roundContext[T]) Done() <-chan struct{}       { return c.done }
func (c *roundContext[T]) Value(key any) any           { return c.values.Value(key) }

func (c *roundContext[T]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
