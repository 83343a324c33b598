package redisdelaytest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Advance moves the virtual clock forward by d and returns once the running subscriptions
// have taken and finished everything due by the new time (see AdvanceTo). A negative d fails
// the test.
func (q *Queue) Advance(d time.Duration) {
	q.t.Helper()
	q.AdvanceTo(q.Now().Add(d))
}

// AdvanceTo moves the virtual clock forward to t (truncated to the microsecond), stopping at
// each due time on the way, and returns once the running subscriptions have taken and
// finished everything due by t, in due order. At each stop it sets miniredis's time, sends a
// "check now" to every running subscription and waits until the queue settles (see Settle),
// so a handler sees the clock at its message's due time, and a message it publishes with a
// delay falls due at the right stop. A schedule.Scheduler made on the Queue's Publisher is one
// of the running subscriptions: every tick due by t was acted on and its message handed out.
// While the test holds a message it took with Receive, the stops are at most a third of its
// lease apart, so that its heartbeat keeps the lease. A t before Now fails the test.
func (q *Queue) AdvanceTo(t time.Time) {
	q.t.Helper()
	q.advancing.Lock()
	defer q.advancing.Unlock()
	target := t.Truncate(time.Microsecond)
	if now := q.Now(); target.Before(now) {
		q.t.Fatalf("redisdelaytest: cannot move the clock back from %s to %s", now.Format(time.RFC3339Nano), target.Format(time.RFC3339Nano))
	}
	due := false
	for {
		groups, counts := q.settle(due)
		now := q.Now()
		if !now.Before(target) {
			return
		}
		var next time.Time
		next, due = q.nextStop(now, target, groups, counts)
		select { // an event of the settled stop must not end the next one's first wait
		case <-q.events:
		default:
		}
		q.setTime(next)
	}
}

// Settle waits, without moving the clock, until the running subscriptions have taken and
// finished everything due now: for each consumer group with a running subscription, nothing
// is due and nothing is in flight, except while the test holds a message it took with Receive
// (the group is then busy, as in production, and only its leases are checked: each extended
// to a whole lease from now). It also waits for a schedule.Scheduler made on the Queue's
// Publisher to subscribe, while no other Scheduler runs. A group whose application does not
// take its messages fails the test after Options.SettleTimeout of wall time, naming the topic,
// group and what is pending.
func (q *Queue) Settle() {
	q.t.Helper()
	q.advancing.Lock()
	defer q.advancing.Unlock()
	q.settle(false)
}

// setTime moves the virtual clock and miniredis's to t, then wakes every subscription.
func (q *Queue) setTime(t time.Time) {
	q.mu.Lock()
	q.now = t
	q.mu.Unlock()
	q.mr.SetTime(t)
	q.wakeAll()
}

// nextStop is the next instant AdvanceTo stops at: the earliest due time after now of a group
// with a running subscription, no later than target, and no later than a third of the lease
// of a busy group; and whether a message falls due then.
func (q *Queue) nextStop(now, target time.Time, groups []*groupState, counts map[topicGroup]groupCounts) (next time.Time, due bool) {
	next = target
	for _, g := range groups {
		if c := counts[g.topicGroup]; c.nextDueUs >= 0 {
			if due := q.stopFor(time.UnixMicro(c.nextDueUs).UTC()); due.Before(next) {
				next = due
			}
		}
		if q.busy(g) {
			if step := now.Add(g.lease / 3); step.Before(next) {
				next = step
			}
		}
	}
	if !next.After(now) {
		next = now.Add(time.Microsecond)
	}
	for _, c := range counts {
		due = due || (c.nextDueUs >= 0 && !q.stopFor(time.UnixMicro(c.nextDueUs)).After(next))
	}
	return next, due
}

// stopFor is the instant AdvanceTo stops at for a message due at due: due itself, or with
// Options.Resolution the first multiple of it from Start at or after due.
func (q *Queue) stopFor(due time.Time) time.Time {
	res := q.opts.Resolution
	if res <= 0 {
		return due
	}
	since := due.Sub(q.opts.Start)
	steps := (since + res - 1) / res
	return q.opts.Start.Add(steps * res)
}

// busy reports whether the test holds a message of g it took with Receive.
func (q *Queue) busy(g *groupState) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, before := range g.held {
		if before {
			return true
		}
	}
	return false
}

// settle waits until pending reports nothing, and returns the running groups and their counts
// then. It polls Redis after each hand-off or finished message the Queue sees, and at least
// every millisecond, and sends the "check now" again now and then in case a wake-up was lost;
// when a message fell due (due), it waits for a first hand-off (or a millisecond) before it
// polls. It fails the test after SettleTimeout.
//
// A poll of several topics or partitions is one script call each, not one snapshot: a dead
// letter can move from a topic not yet read to one already read. So such a poll counts only
// when the next one, with no hand-off or finished message from the start of the first to the
// end of the second, is clean too: whatever moved during the first is where the second reads
// it, unless a consumer took it on, which the Queue sees.
func (q *Queue) settle(due bool) ([]*groupState, map[topicGroup]groupCounts) {
	q.t.Helper()
	deadline := time.Now().Add(q.opts.SettleTimeout)
	wait := 50 * time.Microsecond
	timer := time.NewTimer(time.Millisecond)
	defer timer.Stop()
	if due {
		select {
		case <-q.events:
		case <-timer.C:
		}
	}
	cleanSince := uint64(0) // q.seen when the previous poll, a clean one, began; 0 if none
	for polls := 1; ; polls++ {
		began := q.seen.Load() + 1
		groups := q.runningGroups()
		counts, calls, err := q.counts(groups)
		var pending string
		if err == nil {
			pending, err = q.pending(groups, counts)
		}
		if err == nil && pending == "" {
			if calls <= 1 || (cleanSince != 0 && q.seen.Load()+1 == cleanSince) {
				return groups, counts
			}
			cleanSince = began
			continue
		}
		cleanSince = 0
		if time.Now().After(deadline) {
			if err != nil {
				pending = err.Error()
			}
			q.t.Fatalf("redisdelaytest: at %s the queue did not settle within %s of wall time: %s (read the channels in another goroutine than the one calling Advance: a message.Router, or Queue.Handle)",
				q.Now().Format(time.RFC3339Nano), q.opts.SettleTimeout, pending)
		}
		if polls%32 == 0 {
			q.wakeAll()
		}
		timer.Reset(wait)
		select {
		case <-q.events:
		case <-timer.C:
			wait = min(2*wait, time.Millisecond)
		}
	}
}

// pending describes what the running subscriptions have not finished at the current time, ""
// when nothing.
func (q *Queue) pending(groups []*groupState, counts map[topicGroup]groupCounts) (string, error) {
	now := q.Now()
	out := q.notSubscribed()
	for _, g := range groups {
		c := counts[g.topicGroup]
		if !q.busy(g) {
			if c.due > 0 || c.inFlight > 0 {
				out = append(out, fmt.Sprintf("group %q on topic %q has %d due and %d in flight", g.group, g.topic, c.due, c.inFlight))
			}
			continue
		}
		if c.inFlight == 0 {
			continue
		}
		short, err := q.shortLeases(g, now)
		if err != nil {
			return "", err
		}
		if short != "" {
			out = append(out, short)
		}
	}
	return strings.Join(out, "; "), nil
}

// groupCounts is what settle reads of a group: summed over its partitions, how many messages
// are due now, how many are in flight, and the earliest due time after now (Unix µs, -1 for
// none).
type groupCounts struct {
	due, inFlight, nextDueUs int64
}

// counts reads the counts of groups, one stats script per topic partition, and returns how
// many scripts it ran.
func (q *Queue) counts(groups []*groupState) (map[topicGroup]groupCounts, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	byTopic, partitions := map[string][]string{}, map[string]int{}
	for _, g := range groups {
		byTopic[g.topic] = append(byTopic[g.topic], g.group)
		partitions[g.topic] = max(partitions[g.topic], g.partitions)
	}
	out := make(map[topicGroup]groupCounts, len(groups))
	calls := 0
	for topic, names := range byTopic {
		dead := make([]store.Partition, len(names))
		for n := 0; n < partitions[topic]; n++ {
			for k, g := range names {
				dead[k] = store.Partition{Topic: redisdelay.DefaultDeadLetterTopic(topic, g), N: n}
			}
			res, err := q.store.Stats(ctx, store.Partition{Topic: topic, N: n}, names, dead)
			if err != nil {
				return nil, calls, fmt.Errorf("stats of topic %q: %w", topic, err)
			}
			calls++
			for k, r := range res {
				key := topicGroup{topic, names[k]}
				c, seen := out[key]
				if !seen {
					c.nextDueUs = -1
				}
				c.due += r.Due
				c.inFlight += r.InFlight
				if r.NextDueUs >= 0 && (c.nextDueUs < 0 || r.NextDueUs < c.nextDueUs) {
					c.nextDueUs = r.NextDueUs
				}
				out[key] = c
			}
		}
	}
	return out, calls, nil
}

// shortLeases describes the in-flight messages of busy group g whose lease has not been
// extended to a whole lease from now yet, "" when none.
func (q *Queue) shortLeases(g *groupState, now time.Time) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want := now.Add(g.lease)
	opts := redisdelay.ListOptions{State: redisdelay.StateInFlight, Limit: redisdelay.MaxListLimit}
	for {
		page, err := q.inspector.List(ctx, g.topic, g.group, opts)
		if err != nil {
			return "", err
		}
		for _, m := range page.Messages {
			if m.LeaseDeadline.Before(want) {
				return fmt.Sprintf("group %q on topic %q holds message %s (key %q) with its lease ending at %s, not yet extended", g.group, g.topic, m.UUID, m.Key, m.LeaseDeadline.Format(time.RFC3339Nano)), nil
			}
		}
		if page.NextCursor == "" {
			return "", nil
		}
		opts.Cursor = page.NextCursor
	}
}
