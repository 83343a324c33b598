package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

const (
	// maxCombinedMessages bounds how many messages of concurrent commit calls one round stores.
	// A single larger call still goes whole, alone.
	maxCombinedMessages = 1000
	// maxInFlight is how many rounds per topic partition may be under way at once while at
	// least overlapAt messages wait.
	maxInFlight = 4
	// smallInFlight is how many rounds may be under way at once while fewer than overlapAt
	// messages wait. Two let the callers of one round prepare their next messages while the
	// other round is in Redis, so that neither side idles: with 16 publishers of one message
	// each, on the 2-core benchmark machine, two alternating cohorts of about 8 published
	// 93k msg/s against 77k for one round of 16 at a time, at 4.1 instead of 3.7 µs of Redis
	// time per message; three or four cohorts made rounds of 5 and 3.7 messages, 82k and 80k
	// msg/s at 4.9 and 5.8 µs.
	smallInFlight = 2
	// overlapAt is how many messages must wait before more than smallInFlight rounds run at
	// once. From it on, the fixed part of a script call (about 20 µs of Redis time) is small
	// against the round's messages, and more rounds in flight keep Redis busy while the client
	// prepares the next ones (batched publishing).
	overlapAt = 100
	// lingerMax bounds how long a round waits for its share of the active callers (see
	// groupCommit.target). Without that wait, each caller that comes back to an idle slot
	// would start a round of its own: 16 publishers of one message made rounds of 2–3
	// messages, at twice the Redis time per message. A caller that does not come back costs
	// the next round at most this long.
	lingerMax = 200 * time.Microsecond
)

// errNotStored is wrapped, with the context's error, by a commit whose context ended before its
// messages were taken into a round: nothing of them was sent, so publishing them again is safe.
var errNotStored = errors.New("messages were not stored")

// groupCommit owns the commit calls of one topic partition that wait to be stored and the rounds
// under way, and combines concurrent calls into one store call per round (group commit). Each
// call's messages go whole and contiguous, in call order, into exactly one round, so each call
// stays atomic. A round starts when a slot is free (smallInFlight, or maxInFlight while
// overlapAt messages wait) and its share of the active callers is pending (see target), or
// lingerMax after it began waiting for them. A slot belongs to a round, never to a caller: the
// round runs on its own goroutine and, when its store call returns, gives its result to its
// calls and starts the next round from the calls still pending.
type groupCommit struct {
	store func(ctx context.Context, batch []store.Outgoing) (string, error)

	mu          sync.Mutex
	pending     []*commitCall // in call order
	pendingMsgs int           // messages of the pending calls
	inFlight    int           // rounds under way
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
	lingered  bool
	linger    *time.Timer
	lingerMax time.Duration // lingerMax unless a test sets it
}

// commitCall is one commit call.
type commitCall struct {
	ctx   context.Context
	msgs  []store.Outgoing
	taken bool              // in a round; guarded by groupCommit.mu
	done  chan commitResult // buffered; receives the call's part of its round's result
}

// commitResult is a commit call's result: the outcome letters of its messages (see publish_to
// in lua/lib), or the error of its round.
type commitResult struct {
	outcomes string
	err      error
}

// newGroupCommit returns a groupCommit that stores each round with store. store gets the
// messages of the round's calls, in call order, and a context whose deadline is the latest of
// theirs; it must store all of them or none, and return one outcome letter per message.
func newGroupCommit(store func(ctx context.Context, batch []store.Outgoing) (string, error)) *groupCommit {
	return &groupCommit{store: store, lingerMax: lingerMax}
}

// commit stores msgs in a round shared with concurrent calls and returns within ctx's deadline.
// It returns the round's result (the outcome letters of msgs, or the store error) when the
// round finished first. When
// ctx ends before the call was taken into a round, it returns an error wrapping errNotStored and
// ctx.Err(), and msgs are never stored. When ctx ends while the round is under way, it returns an
// error wrapping ErrOutcomeUnknown and ctx.Err(): msgs are then either all stored or none is.
// The cancellation of ctx never aborts a round under way, since other calls share it.
func (g *groupCommit) commit(ctx context.Context, msgs []store.Outgoing) (string, error) {
	c := &commitCall{ctx: ctx, msgs: msgs, done: make(chan commitResult, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.pendingMsgs += len(msgs)
	g.startRounds()
	g.mu.Unlock()

	select {
	case r := <-c.done:
		return r.outcomes, r.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.taken {
		if i := slices.Index(g.pending, c); i >= 0 {
			g.pending = slices.Delete(g.pending, i, i+1)
			g.pendingMsgs -= len(c.msgs)
		}
		return "", fmt.Errorf("%w: %w", errNotStored, ctx.Err())
	}
	select {
	case r := <-c.done: // the round finished as ctx ended
		return r.outcomes, r.err
	default:
		return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

// startRounds starts rounds of pending calls while a slot is free and target calls are pending,
// or lingerMax has passed since the first of them began to wait for the others; g.mu is held.
func (g *groupCommit) startRounds() {
	for len(g.pending) > 0 {
		limit := smallInFlight
		if g.pendingMsgs >= overlapAt {
			limit = maxInFlight
		}
		if g.inFlight >= limit {
			return
		}
		if len(g.pending) < g.target && !g.lingered {
			if g.linger == nil {
				g.linger = time.AfterFunc(g.lingerMax, func() {
					g.mu.Lock()
					defer g.mu.Unlock()
					g.linger, g.lingered = nil, true
					g.startRounds()
				})
			}
			return
		}
		if round := g.takeRound(); len(round) > 0 {
			g.inFlight++
			g.callsInFlight += len(round)
			g.lingered = false
			if g.linger != nil {
				g.linger.Stop()
				g.linger = nil
			}
			go g.run(round)
		}
	}
}

// takeRound removes from pending and returns the longest prefix of calls that holds at most
// maxCombinedMessages messages, or the first call alone when it holds more. Calls whose context
// already ended are dropped on the way: their commit returns errNotStored. g.mu is held.
func (g *groupCommit) takeRound() []*commitCall {
	var round []*commitCall
	size, n := 0, 0
	for ; n < len(g.pending); n++ {
		c := g.pending[n]
		if c.ctx.Err() != nil {
			g.pendingMsgs -= len(c.msgs)
			continue
		}
		if len(round) > 0 && size+len(c.msgs) > maxCombinedMessages {
			break
		}
		c.taken = true
		round = append(round, c)
		size += len(c.msgs)
		g.pendingMsgs -= len(c.msgs)
	}
	g.pending = slices.Delete(g.pending, 0, n)
	return round
}

// run stores one round, frees the round's slot and starts the next round, then gives its result
// to the round's calls: the next round is on its way to Redis while they wake up. A store call
// that outlives the round's deadline (a Redis that does not answer, with a client that does not
// bound calls by their context) frees the slot at the deadline, so that it holds up the next
// rounds no longer than its calls wait; it finishes in the background and its calls have
// returned ErrOutcomeUnknown by then.
func (g *groupCommit) run(round []*commitCall) {
	ctx, cancel := roundContext(round)
	var batch []store.Outgoing
	for _, c := range round {
		batch = append(batch, c.msgs...)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			g.mu.Lock()
			g.inFlight--
			g.callsInFlight -= len(round)
			g.target = (g.callsInFlight + len(round) + len(g.pending) + smallInFlight - 1) / smallInFlight
			g.startRounds()
			g.mu.Unlock()
		})
	}
	stop := context.AfterFunc(ctx, release)
	outcomes, err := g.store(ctx, batch)
	stop()
	cancel()
	release()
	if err == nil && len(outcomes) != len(batch) {
		err = fmt.Errorf("store returned %d outcomes for %d messages", len(outcomes), len(batch))
	}
	for _, c := range round {
		r := commitResult{err: err}
		if err == nil {
			r.outcomes, outcomes = outcomes[:len(c.msgs)], outcomes[len(c.msgs):]
		}
		c.done <- r
	}
}

// roundContext returns the context of a round's store call: the values of the round's first
// call, and the latest deadline among its calls (none when a call has none). No call's
// cancellation reaches it, so that one caller giving up does not abort the others' round.
func roundContext(round []*commitCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(round[0].ctx)
	var latest time.Time
	for _, c := range round {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// commit stores msgs on topic partition part through its groupCommit; see
// groupCommit.commit for the result.
func (p *Publisher) commit(ctx context.Context, part store.Partition, msgs []store.Outgoing) (string, error) {
	g, ok := p.queues.Load(part)
	if !ok {
		var loaded bool
		g, loaded = p.queues.LoadOrStore(part, newGroupCommit(func(ctx context.Context, batch []store.Outgoing) (string, error) {
			return p.storeBatch(ctx, part, batch)
		}))
		if !loaded && p.queueCount.Add(1) > maxQueues {
			p.forgetIdleQueues()
		}
	}
	return g.(*groupCommit).commit(ctx, msgs)
}

// maxQueues is how many topic partitions a Publisher keeps a groupCommit for before it forgets
// the idle ones.
const maxQueues = 10000

// forgetIdleQueues drops the groupCommits with nothing pending or under way. A call that loaded
// one just before still works on it: a groupCommit needs no map entry to store its rounds, the
// entry only lets concurrent calls share rounds.
func (p *Publisher) forgetIdleQueues() {
	p.queues.Range(func(key, g any) bool {
		if g.(*groupCommit).idle() && p.queues.CompareAndDelete(key, g) {
			p.queueCount.Add(-1)
		}
		return true
	})
}

// idle reports whether g has no call pending and no round under way.
func (g *groupCommit) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) == 0 && g.inFlight == 0
}

// storeBatch runs the publish script for batch on topic partition part, for its registered
// consumer groups, bounded by ctx. The batch gets one call token, so that a script
// run that the client repeats stores nothing more.
func (p *Publisher) storeBatch(ctx context.Context, part store.Partition, batch []store.Outgoing) (string, error) {
	call := store.Call{Token: store.NewToken(), TTL: p.callTTL}
	// The round's calls bound their own wait, and the round frees its slot at its deadline
	// (groupCommit.run): the script runs on the round's goroutine.
	st := p.store.Directly()
	var outcomes string
	err := p.groups.withGroups(ctx, part, func(ctx context.Context, groups []string) (err error) {
		outcomes, err = st.Publish(ctx, part, call, groups, batch)
		return err
	})
	return outcomes, err
}
