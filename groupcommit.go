package redisdelay

import (
	"context"
	"slices"
	"sync"
)

const (
	// maxCombinedMessages bounds how many messages of concurrent Publish calls one script call
	// stores. A single larger call still goes whole.
	maxCombinedMessages = 1000
	// maxLeaders is how many script calls per topic may be under way at once, so that a round
	// trip's latency does not idle Redis.
	maxLeaders = 4
)

// publishQueue combines concurrent Publish calls to one topic into one script call (group
// commit). Each call's messages always go into a single script call, so each call stays atomic;
// a call never waits for a timer, only for the script calls under way. A caller that finds
// fewer than maxLeaders leaders becomes one and stores rounds of waiting calls until its own is
// done, then hands the leadership to the next waiting call.
type publishQueue struct {
	mu      sync.Mutex
	pending []*publishCall
	leaders int
}

// publishCall is one Publish call waiting to be stored.
type publishCall struct {
	msgs    []stored
	done    chan error    // receives the result of the script call that stored msgs
	lead    chan struct{} // closed when this call must become a leader
	leading bool          // lead is closed; guarded by publishQueue.mu
}

// commit stores msgs through the topic's queue and returns the script call's result, or
// ctx.Err() when ctx ends first (then the messages are either stored whole or not at all).
func (p *Publisher) commit(ctx context.Context, topic string, msgs []stored) error {
	q := p.queue(topic)
	call := &publishCall{msgs: msgs, done: make(chan error, 1), lead: make(chan struct{})}
	q.mu.Lock()
	q.pending = append(q.pending, call)
	q.promote()
	q.mu.Unlock()

	for {
		select {
		case err := <-call.done:
			return err
		case <-call.lead:
			p.lead(topic, q, call)
			return <-call.done
		case <-ctx.Done():
			q.mu.Lock()
			if i := slices.Index(q.pending, call); i >= 0 {
				q.pending = slices.Delete(q.pending, i, i+1)
			}
			if call.leading {
				q.leaders--
				q.promote()
			}
			q.mu.Unlock()
			return ctx.Err()
		}
	}
}

// lead stores rounds of pending calls until own is stored (by this or another leader), then
// hands the leadership over.
func (p *Publisher) lead(topic string, q *publishQueue, own *publishCall) {
	defer func() {
		q.mu.Lock()
		q.leaders--
		q.promote()
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		n, size := 0, 0
		for n < len(q.pending) && (n == 0 || size+len(q.pending[n].msgs) <= maxCombinedMessages) {
			size += len(q.pending[n].msgs)
			n++
		}
		round := slices.Clone(q.pending[:n])
		q.pending = slices.Delete(q.pending, 0, n)
		q.mu.Unlock()
		if n == 0 {
			return
		}

		batch := make([]stored, 0, size)
		for _, c := range round {
			batch = append(batch, c.msgs...)
		}
		err := p.storeBatch(topic, batch)
		ownDone := false
		for _, c := range round {
			c.done <- err
			ownDone = ownDone || c == own
		}
		if ownDone {
			return
		}
	}
}

// promote makes waiting calls leaders while there are fewer than maxLeaders; q.mu is held.
func (q *publishQueue) promote() {
	for _, c := range q.pending {
		if q.leaders >= maxLeaders {
			return
		}
		if !c.leading {
			c.leading = true
			q.leaders++
			close(c.lead)
		}
	}
}

func (p *Publisher) queue(topic string) *publishQueue {
	q, _ := p.queues.LoadOrStore(topic, &publishQueue{})
	return q.(*publishQueue)
}

// storeBatch runs one publish script call for batch, bounded by OperationTimeout.
func (p *Publisher) storeBatch(topic string, batch []stored) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.config.OperationTimeout)
	defer cancel()
	return p.groups.publish(ctx, topic, func(ctx context.Context, expected int, groups []string) error {
		return p.store.publish(ctx, topic, expected, groups, batch)
	})
}
