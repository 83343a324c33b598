package redisdelaytest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
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
// delay falls due at the right stop. While a message is held across the advance, the stops
// are at most a third of its lease apart, so that its heartbeat keeps the lease. A t before
// Now fails the test.
func (q *Queue) AdvanceTo(t time.Time) {
	q.t.Helper()
	q.advancing.Lock()
	defer q.advancing.Unlock()
	target := t.Truncate(time.Microsecond)
	if now := q.Now(); target.Before(now) {
		q.t.Fatalf("redisdelaytest: cannot move the clock back from %s to %s", now.Format(time.RFC3339Nano), target.Format(time.RFC3339Nano))
	}
	q.markBusy()
	for {
		q.settle()
		now := q.Now()
		if !now.Before(target) {
			return
		}
		next, err := q.nextStop(now, target)
		if err != nil {
			q.t.Fatalf("redisdelaytest: at %s: %v", now.Format(time.RFC3339Nano), err)
		}
		q.setTime(next)
	}
}

// Settle waits, without moving the clock, until the running subscriptions have taken and
// finished everything due now: for each consumer group with a running subscription, nothing
// is due and nothing is in flight, except while the application holds a message it took
// before this call (the group is then busy, as in production, and only its leases are
// checked: each extended to a whole lease from now). A group whose application does not take
// its messages fails the test after Options.SettleTimeout of wall time, naming the topic,
// group and what is pending.
func (q *Queue) Settle() {
	q.t.Helper()
	q.advancing.Lock()
	defer q.advancing.Unlock()
	q.markBusy()
	q.settle()
}

// markBusy notes the messages the application holds as an advance begins.
func (q *Queue) markBusy() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, g := range q.groups {
		for msg := range g.held {
			g.held[msg] = true
		}
	}
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
// of a busy group.
func (q *Queue) nextStop(now, target time.Time) (time.Time, error) {
	next := target
	groups := q.runningGroups()
	if len(groups) == 0 {
		return next, nil
	}
	stats, err := q.stats(groups)
	if err != nil {
		return next, err
	}
	for _, g := range groups {
		st, ok := stats[g.topicGroup]
		if ok && !st.NextDue.IsZero() && st.NextDue.Before(next) {
			next = st.NextDue
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
	return next, nil
}

// busy reports whether the application holds a message of g it took before the current
// advance.
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

// settle waits until pending reports nothing, polling Redis, and sends the "check now" again
// now and then in case a wake-up was lost. It fails the test after SettleTimeout.
func (q *Queue) settle() {
	q.t.Helper()
	deadline := time.Now().Add(q.opts.SettleTimeout)
	wait := 20 * time.Microsecond
	for polls := 1; ; polls++ {
		pending, err := q.pending()
		if err == nil && pending == "" {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				pending = err.Error()
			}
			q.t.Fatalf("redisdelaytest: at %s the queue did not settle within %s of wall time: %s (read the channels in another goroutine than the one calling Advance: a message.Router, or Queue.Handle)",
				q.Now().Format(time.RFC3339Nano), q.opts.SettleTimeout, pending)
		}
		if polls%16 == 1 {
			q.wakeAll()
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// pending describes what the running subscriptions have not finished at the current time, ""
// when nothing.
func (q *Queue) pending() (string, error) {
	groups := q.runningGroups()
	if len(groups) == 0 {
		return "", nil
	}
	stats, err := q.stats(groups)
	if err != nil {
		return "", err
	}
	now := q.Now()
	var out []string
	for _, g := range groups {
		st := stats[g.topicGroup]
		if !q.busy(g) {
			if st.Due > 0 || st.InFlight > 0 {
				out = append(out, fmt.Sprintf("group %q on topic %q has %d due and %d in flight", g.group, g.topic, st.Due, st.InFlight))
			}
			continue
		}
		if st.InFlight == 0 {
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

// stats returns the statistics of groups, by topic and group.
func (q *Queue) stats(groups []*groupState) (map[topicGroup]redisdelay.GroupStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seen := map[string]bool{}
	var topics []string
	for _, g := range groups {
		if !seen[g.topic] {
			seen[g.topic] = true
			topics = append(topics, g.topic)
		}
	}
	stats, err := q.inspector.Stats(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[topicGroup]redisdelay.GroupStats, len(stats))
	for _, st := range stats {
		out[topicGroup{st.Topic, st.Group}] = st
	}
	return out, nil
}
