package redisdelaytest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// RequireScheduled fails t unless the message with key on topic is scheduled at dueAt (to the
// microsecond) in every consumer group registered on topic, or waits parked for a first group
// with that due time. The failure names the topic, key and the state found in each group.
func (q *Queue) RequireScheduled(t TB, topic, key string, dueAt time.Time) {
	t.Helper()
	st := q.status(t, topic, key)
	want := dueAt.Truncate(time.Microsecond)
	ok := len(st.Groups) > 0
	for _, g := range st.Groups {
		ok = ok && g.State == redisdelay.StateScheduled && g.DueAt.Equal(want)
	}
	if !ok {
		t.Fatalf("redisdelaytest: key %q on topic %q: want scheduled at %s; found %s", key, topic, want.Format(time.RFC3339Nano), describe(st))
	}
}

// RequireCancelled fails t unless the message with key on topic was cancelled: no group holds
// it any more and none of the Queue's subscriptions received it, or, with
// PublisherConfig.KeyRetention, every group records it as cancelled. The failure names the
// topic, key, and each group's state with its due time.
func (q *Queue) RequireCancelled(t TB, topic, key string) {
	t.Helper()
	st := q.status(t, topic, key)
	ok := !st.Live
	for _, g := range st.Groups {
		ok = ok && (g.State == redisdelay.StateCancelled || g.State == redisdelay.StateNotFound)
	}
	if ok {
		for _, d := range q.allReceived() {
			if d.Topic == topic && d.Key == key {
				t.Fatalf("redisdelaytest: key %q on topic %q: want cancelled; group %q received it (attempt %d, due %s) at %s", key, topic, d.Group, d.Attempt, d.DueAt.Format(time.RFC3339Nano), d.At.Format(time.RFC3339Nano))
			}
		}
		return
	}
	t.Fatalf("redisdelaytest: key %q on topic %q: want cancelled; found %s", key, topic, describe(st))
}

// RequireReceived fails t unless group received the message with key on topic, and returns
// its first delivery. The failure lists what the group received.
func (q *Queue) RequireReceived(t TB, topic, group, key string) Delivery {
	t.Helper()
	got := q.Received(group)
	for _, d := range got {
		if d.Topic == topic && d.Key == key {
			return d
		}
	}
	t.Fatalf("redisdelaytest: group %q did not receive key %q on topic %q by %s; it received %s", group, key, topic, q.Now().Format(time.RFC3339Nano), listDeliveries(got))
	return Delivery{}
}

// RequireNotReceived fails t if group received the message with key on topic, naming when
// and for which due time.
func (q *Queue) RequireNotReceived(t TB, topic, group, key string) {
	t.Helper()
	for _, d := range q.Received(group) {
		if d.Topic == topic && d.Key == key {
			t.Fatalf("redisdelaytest: group %q received key %q on topic %q at %s (attempt %d, due %s); want never", group, key, topic, d.At.Format(time.RFC3339Nano), d.Attempt, d.DueAt.Format(time.RFC3339Nano))
		}
	}
}

// Scheduled returns the messages scheduled for group on topic (due later, or due now and not
// yet claimed), in due order, with their due times. An error fails t.
func (q *Queue) Scheduled(t TB, topic, group string) []redisdelay.MessageInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []redisdelay.MessageInfo
	opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: redisdelay.MaxListLimit}
	for {
		page, err := q.inspector.List(ctx, topic, group, opts)
		if err != nil {
			t.Fatalf("redisdelaytest: list the scheduled messages of group %q on topic %q: %v", group, topic, err)
		}
		out = append(out, page.Messages...)
		if page.NextCursor == "" {
			return out
		}
		opts.Cursor = page.NextCursor
	}
}

// status reads the status of key on topic, failing t on an error.
func (q *Queue) status(t TB, topic, key string) redisdelay.KeyStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := q.inspector.Status(ctx, topic, redisdelay.ByKey(key))
	if err != nil {
		t.Fatalf("redisdelaytest: status of key %q on topic %q: %v", key, topic, err)
	}
	return st
}

// allReceived returns every delivery of every group.
func (q *Queue) allReceived() []Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Delivery
	for _, ds := range q.received {
		out = append(out, ds...)
	}
	return out
}

// describe says where each group stands with a key, groups sorted by name.
func describe(st redisdelay.KeyStatus) string {
	if len(st.Groups) == 0 {
		return "no consumer group and nothing parked"
	}
	names := make([]string, 0, len(st.Groups))
	for g := range st.Groups {
		names = append(names, g)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for n, name := range names {
		g := st.Groups[name]
		label := fmt.Sprintf("group %q", name)
		if name == redisdelay.ParkedGroup {
			label = "parked (no group yet)"
		}
		switch g.State {
		case redisdelay.StateScheduled:
			parts[n] = fmt.Sprintf("%s: scheduled at %s (attempt %d)", label, g.DueAt.Format(time.RFC3339Nano), g.Attempt)
		case redisdelay.StateInFlight:
			parts[n] = fmt.Sprintf("%s: in flight until %s (attempt %d)", label, g.LeaseDeadline.Format(time.RFC3339Nano), g.Attempt)
		default:
			parts[n] = fmt.Sprintf("%s: %s", label, g.State)
		}
	}
	return strings.Join(parts, ", ")
}

// listDeliveries lists deliveries for a failure message.
func listDeliveries(ds []Delivery) string {
	if len(ds) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ds))
	for n, d := range ds {
		parts[n] = fmt.Sprintf("key %q on topic %q (attempt %d, due %s, at %s)", d.Key, d.Topic, d.Attempt, d.DueAt.Format(time.RFC3339Nano), d.At.Format(time.RFC3339Nano))
	}
	return strings.Join(parts, ", ")
}
