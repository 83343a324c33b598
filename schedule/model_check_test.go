package schedule_test

// The schedule model test's runs of the Schedulers and its checks: running them until idle,
// draining the topic, comparing what arrived and the Inspector's view with the model, and the
// keys left at the end.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// runSchedulers runs n Schedulers until every tick due by the Redis clock's now has been acted
// on, stops them, moves the model on and checks. With crashAfter >= 0, a Scheduler first runs
// that long and is stopped mid-run.
func (r *smRun) runSchedulers(n int, crashAfter time.Duration) {
	ctx := context.Background()
	start := func(concurrency int) (*schedule.Scheduler, context.CancelFunc, chan error) {
		s := r.newScheduler(concurrency)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		return s, cancel, done
	}
	stop := func(s *schedule.Scheduler, cancel context.CancelFunc, done chan error) {
		r.gate.stopBetweenCalls(cancel)
		select {
		case err := <-done:
			if err != nil {
				r.failf("api", "Run: %v", err)
			}
		case <-time.After(smWait):
			r.failf("stuck", "Run did not return within %s of its cancel", smWait)
		}
		_ = s.Close()
	}
	if crashAfter >= 0 {
		s, cancel, done := start(2)
		time.Sleep(crashAfter) // stops it at a random point of its work, not to wait for an outcome
		stop(s, cancel, done)
	}
	type running struct {
		s      *schedule.Scheduler
		cancel context.CancelFunc
		done   chan error
	}
	var rs []running
	for k := 0; k < n; k++ {
		s, cancel, done := start(1 + k)
		rs = append(rs, running{s, cancel, done})
	}
	r.waitIdle()
	for _, x := range rs {
		stop(x.s, x.cancel, x.done)
	}
	for i, s := range r.scheds {
		if s != nil && !s.paused && !s.pending.IsZero() && !smActsAt(smDef(smName(i), s.def), s.pending).After(r.now) {
			r.fire(i)
		}
	}
	r.check()
}

// waitIdle waits until no schedule's pending tick is due by now and the Schedulers' consumer
// group holds no tick message that is due or in flight.
func (r *smRun) waitIdle() {
	ctx := context.Background()
	deadline := time.Now().Add(smWait)
	for {
		busy := ""
		infos, _, err := schedule.List(ctx, r.in, "", 100)
		if err != nil {
			busy = err.Error()
		}
		for _, info := range infos {
			if !info.Paused && !info.Pending.IsZero() && !smActsAt(info.Schedule, info.Pending).After(r.now) {
				busy = fmt.Sprintf("%s pending %s", info.Schedule.Name, info.Pending.UTC().Format(smTimeLayout))
			}
		}
		if busy == "" {
			stats, err := r.in.Stats(ctx, schedule.TickTopic)
			if err != nil {
				busy = err.Error()
			}
			for _, g := range stats {
				if g.Due+g.InFlight > 0 {
					busy = fmt.Sprintf("tick group %s: %d due, %d in flight", g.Group, g.Due, g.InFlight)
				}
			}
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			r.failf("stuck", "the Schedulers are not idle after %s: %s", smWait, busy)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drain receives and acks every message of the topic's group due by now, with a Subscriber
// started after the last jump of the clock.
func (r *smRun) drain() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: r.client, KeyPrefix: r.prefix, ConsumerGroup: smGroup, LeaseTimeout: smLease,
	}, smLogger{r: r})
	if err != nil {
		r.t.Fatal(err)
	}
	msgs, err := sub.Subscribe(ctx, smTopic)
	if err != nil {
		r.t.Fatal(err)
	}
	var mu sync.Mutex
	var got []smDelivery
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range msgs {
			d := smDelivery{uuid: msg.UUID, key: msg.Metadata.Get(redisdelay.KeyMetadataKey),
				tickMeta: msg.Metadata.Get(redisdelay.TickTimeMetadataKey), at: r.now}
			d.due, _ = time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
			msg.Ack()
		}
	}()
	deadline := time.Now().Add(smWait)
	for {
		stats, err := r.in.Stats(ctx, smTopic)
		idle := err == nil
		for _, g := range stats {
			if g.Group == smGroup && g.Due+g.InFlight > 0 {
				idle = false
			}
		}
		if idle {
			break
		}
		if time.Now().After(deadline) {
			r.failf("stuck", "the drain did not end within %s: %v %v", smWait, stats, err)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.gate.stopBetweenCalls(cancel)
	_ = sub.Close()
	<-done
	for _, d := range got {
		r.deliveries[d.key] = append(r.deliveries[d.key], d)
	}
}

// check drains the topic and compares the messages delivered so far and those stored ahead, and
// each schedule's schedule.Info, with the model.
func (r *smRun) check() {
	ctx := context.Background()
	r.drain()
	ahead := map[string]redisdelay.MessageInfo{}
	opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 1000}
	for {
		page, err := r.in.List(ctx, smTopic, smGroup, opts)
		if err != nil {
			r.failf("api", "list: %v", err)
			break
		}
		for _, m := range page.Messages {
			ahead[m.Key] = m
		}
		if opts.Cursor = page.NextCursor; opts.Cursor == "" {
			break
		}
	}
	for key, ds := range r.deliveries {
		e, ok := r.expect[key]
		switch {
		case !ok:
			r.failf("unexpected", "message %s (tick %s) delivered %d time(s), due %s, expected none", key, ds[0].tickMeta, len(ds), ds[0].due.Format(smTimeLayout))
			continue
		case len(ds) > 1:
			r.failf("duplicate", "message %s delivered %d times", key, len(ds))
		}
		for _, d := range ds {
			if d.due.Before(e.tick) {
				r.failf("early", "message %s due %s, before its tick %s", key, d.due.Format(smTimeLayout), e.tick.Format(smTimeLayout))
			}
			if d.tickMeta != e.tick.UTC().Format(time.RFC3339Nano) {
				r.failf("metadata", "message %s: tick time %s, want %s", key, d.tickMeta, e.tick.UTC().Format(time.RFC3339Nano))
			}
		}
	}
	for key, m := range ahead {
		e, ok := r.expect[key]
		switch {
		case !ok:
			r.failf("unexpected", "message %s stored ahead, due %s, expected none", key, m.DueAt.Format(smTimeLayout))
		case len(r.deliveries[key]) > 0:
			r.failf("duplicate", "message %s stored ahead (due %s) and delivered", key, m.DueAt.Format(smTimeLayout))
		case !m.DueAt.Equal(e.tick):
			r.failf("early", "message %s stored ahead due %s, want its tick %s", key, m.DueAt.Format(smTimeLayout), e.tick.Format(smTimeLayout))
		}
	}
	keys := make([]string, 0, len(r.expect))
	for key := range r.expect {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		e := r.expect[key]
		_, isAhead := ahead[key]
		switch {
		case len(r.deliveries[key]) == 0 && !e.tick.After(r.now):
			r.failf("missing", "message %s (tick %s) not delivered by now (stored ahead: %v)", key, e.tick.Format(smTimeLayout), isAhead)
		case len(r.deliveries[key]) == 0 && !isAhead:
			r.failf("missing", "message %s (tick %s) not stored ahead", key, e.tick.Format(smTimeLayout))
		}
	}
	infos, _, err := schedule.List(ctx, r.in, "", 100)
	if err != nil {
		r.failf("api", "schedules: %v", err)
	}
	seen := map[string]bool{}
	for _, info := range infos {
		name := info.Schedule.Name
		seen[name] = true
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "s"))
		s := r.scheds[i]
		if s == nil {
			r.failf("info", "schedule %s listed, but deleted", name)
			continue
		}
		want := fmt.Sprintf("paused=%v pending=%s published=%d skipped=%d last=%s", s.paused, smFormat(s.pending), s.published, s.skipped, smFormat(s.lastTick))
		got := fmt.Sprintf("paused=%v pending=%s published=%d skipped=%d last=%s", info.Paused, smFormat(info.Pending), info.Published, info.Skipped, smFormat(info.LastTick))
		if want != got {
			r.failf("info", "schedule %s (%s): want %s, got %s", name, smDef(name, s.def).Spec, want, got)
		}
	}
	for i, s := range r.scheds {
		if s != nil && !seen[smName(i)] {
			r.failf("info", "schedule %s not listed", smName(i))
		}
	}
}

func smFormat(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(smTimeLayout)
}

// finish deletes every schedule, lets an hour pass, runs the Schedulers and drains, checks, and
// checks that no key of the schedules is left in the tick topic's slot.
func (r *smRun) finish() {
	ctx := context.Background()
	r.runSchedulers(1, -1)
	for i := range r.scheds {
		r.exec(smOp{kind: smDelete, sched: i})
	}
	r.advance(time.Hour)
	r.runSchedulers(1, -1)
	// What the tick topic's new-group window (opened by the Schedulers' group, the topic's first)
	// kept in its parked set is dropped by the next publish after the window, or by the claim
	// loop of a subscription that registered while it was open, once its client clock passes
	// the window's end; these Schedulers run for a moment each, and re-registering an existing
	// group drops nothing. So one more schedule comes and goes, an hour before the check.
	throwaway := schedule.Schedule{Name: "throwaway", Topic: smTopic, Spec: "@every 10s"}
	if _, err := r.admin.Put(ctx, throwaway); err != nil {
		r.failf("api", "put %s: %v", throwaway.Name, err)
	}
	if err := r.admin.Delete(ctx, throwaway.Name); err != nil {
		r.failf("api", "delete %s: %v", throwaway.Name, err)
	}
	r.advance(time.Hour)
	// A Scheduler runs while the keys are checked.
	s := r.newScheduler(1)
	defer s.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	var left []string
	for deadline := time.Now().Add(smWait); ; {
		if left = r.leftKeys(); len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, v := range left {
		r.failf("keys", "%s", v)
	}
}

// leftKeys returns what is wrong with the keys left in the tick topic's slot: only its
// registration (seq, groups, the Schedulers' group's epoch and empty lease set) may stay, and
// call records and claim records that expire.
func (r *smRun) leftKeys() []string {
	ctx := context.Background()
	var left []string
	keys, err := scanKeys(ctx, backend{client: r.client, miniredis: r.mr}, r.prefix+"{"+schedule.TickTopic+"}*")
	if err != nil {
		return []string{"scan: " + err.Error()}
	}
	tag := r.prefix + "{" + schedule.TickTopic + "}"
	for _, k := range keys {
		rest := strings.TrimPrefix(k, tag)
		switch {
		case rest == ":seq", rest == ":seq:birth", rest == ":groups", rest == ":g:"+schedule.TickGroup+":epoch":
		case rest == ":g:"+schedule.TickGroup+":lease":
			if n := r.client.ZCount(ctx, k, "-inf", "(1e300").Val(); n != 0 {
				left = append(left, fmt.Sprintf("%s holds %d leases", k, n))
			}
		case strings.HasPrefix(rest, ":call:"), strings.Contains(rest, ":claim:"), rest == ":window":
			if ttl := r.client.PTTL(ctx, k).Val(); ttl < 0 && ttl != -2*time.Nanosecond {
				left = append(left, fmt.Sprintf("%s has no expiry (PTTL %s)", k, ttl))
			}
		default:
			left = append(left, fmt.Sprintf("%s (%s) is left after every schedule was deleted and an hour passed", k, r.client.Type(ctx, k).Val()))
		}
	}
	return left
}

// registerTickGroup runs a Scheduler until the Schedulers' consumer group is registered.
func (r *smRun) registerTickGroup() {
	s := r.newScheduler(1)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { r.gate.stopBetweenCalls(cancel); <-done }()
	deadline := time.Now().Add(smWait)
	for time.Now().Before(deadline) {
		stats, _ := r.in.Stats(ctx, schedule.TickTopic)
		for _, g := range stats {
			if g.Group == schedule.TickGroup {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.t.Fatalf("the Schedulers' consumer group is not registered after %s", smWait)
}
