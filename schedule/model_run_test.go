package schedule_test

// One run of the schedule model test: the model of each schedule and what each operation does
// to it and to Redis.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// smSched is the model of one schedule.
type smSched struct {
	def                int
	paused             bool
	pending            time.Time // zero: none (paused, or no future tick)
	published, skipped int64
	lastTick           time.Time
}

// smExpect is a message that must exist on the schedules' topic.
type smExpect struct {
	name string
	tick time.Time // nominal time; a Trigger's Redis clock now
}

// smDelivery is one message the drain received.
type smDelivery struct {
	uuid, key, tickMeta string
	due, at             time.Time // due time (DueTimeMetadataKey) and the Redis clock's now at the drain
}

type smRun struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	client *redis.Client
	gate   *smGate
	prefix string
	admin  *schedule.Scheduler
	in     *redisdelay.Inspector
	now    time.Time

	scheds     [smSchedules]*smSched
	expect     map[string]smExpect     // message key -> what it is
	deliveries map[string][]smDelivery // message key -> deliveries
	ops        []smOp
	step       int // the operation under way, for the violations

	mu         sync.Mutex
	violations []violation
}

func (r *smRun) failf(kind, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	where := "at the end"
	if r.step < len(r.ops) {
		where = fmt.Sprintf("op %d (%s)", r.step, r.ops[r.step])
	}
	r.violations = append(r.violations, violation{kind, fmt.Sprintf("%s, Redis clock %s: %s", where, r.now.Format(smTimeLayout), fmt.Sprintf(format, args...))})
}

func (r *smRun) setStep(k int) {
	r.mu.Lock()
	r.step = k
	r.mu.Unlock()
}

const smTimeLayout = "15:04:05.000"

func smName(i int) string { return "s" + strconv.Itoa(i) }

// smLogger records every error a component logs as a violation.
type smLogger struct {
	r      *smRun
	fields watermill.LogFields
}

func (l smLogger) Error(msg string, err error, fields watermill.LogFields) {
	if errors.Is(err, context.Canceled) { // a call cut short by stopping a Scheduler or the drain
		return
	}
	if strings.Contains(msg, "retry") { // retried: the model's checks judge the outcome
		l.r.t.Logf("schedule model: logged, retried: %s: %v %v", msg, err, fields)
		return
	}
	l.r.failf("error", "logged: %s: %v %v %v", msg, err, l.fields, fields)
}
func (l smLogger) Info(string, watermill.LogFields)  {}
func (l smLogger) Debug(string, watermill.LogFields) {}
func (l smLogger) Trace(string, watermill.LogFields) {}
func (l smLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return smLogger{r: l.r, fields: l.fields.Add(fields)}
}

func (r *smRun) newScheduler(concurrency int) *schedule.Scheduler {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: r.client, KeyPrefix: r.prefix}, smLogger{r: r})
	if err != nil {
		r.t.Fatal(err)
	}
	s, err := schedule.New(schedule.Config{Publisher: pub, LeaseTimeout: smLease, Concurrency: concurrency}, smLogger{r: r})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// ticksOf returns the first tick after t of definition def of schedule name, zero when none.
func (r *smRun) nextOf(name string, def int, t time.Time) time.Time {
	ticks, err := smDef(name, def).NextTicks(t, 1)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(ticks) == 0 {
		return time.Time{}
	}
	return ticks[0]
}

// arm arms schedule i's next tick after the Redis clock's now, and with OverlapAllowAll
// expects its message, stored ahead.
func (r *smRun) arm(i int) {
	s, name := r.scheds[i], smName(i)
	s.pending = r.nextOf(name, s.def, r.now)
	if !s.pending.IsZero() && smDef(name, s.def).Overlap == schedule.OverlapAllowAll {
		r.expectMsg(name, s.pending, schedule.TickKey(name, s.pending))
	}
}

func (r *smRun) expectMsg(name string, tick time.Time, key string) {
	if len(r.deliveries[key]) > 0 {
		r.failf("model", "expects %s again after it was delivered", key)
	}
	r.expect[key] = smExpect{name: name, tick: tick}
}

// dropPending forgets schedule i's pending tick (pause, update, delete): with OverlapAllowAll
// its message, stored ahead, is cancelled unless it was delivered.
func (r *smRun) dropPending(i int) {
	s, name := r.scheds[i], smName(i)
	if !s.pending.IsZero() && smDef(name, s.def).Overlap == schedule.OverlapAllowAll {
		key := schedule.TickKey(name, s.pending)
		if len(r.deliveries[key]) == 0 {
			delete(r.expect, key)
		}
	}
	s.pending = time.Time{}
}

// smActsAt is when a Scheduler acts on a schedule's tick: at the tick, or, when the schedule
// stores its messages ahead (OverlapAllowAll), a little after it.
func smActsAt(def schedule.Schedule, tick time.Time) time.Time {
	if def.Overlap == schedule.OverlapAllowAll || def.Overlap == "" {
		return tick.Add(schedule.PrearmedTickDelayForTest)
	}
	return tick
}

// fire is what acting on schedule i's pending tick, due by now, does.
func (r *smRun) fire(i int) {
	s, name := r.scheds[i], smName(i)
	def := smDef(name, s.def)
	// The ticks from the pending one to now; with OverlapAllowAll the pending tick's message was
	// stored ahead and is published however late.
	var ticks []time.Time
	t := s.pending
	for ; !t.IsZero() && !t.After(r.now); t = r.nextOf(name, s.def, t) {
		ticks = append(ticks, t)
	}
	s.pending = t
	if def.Overlap == schedule.OverlapAllowAll {
		s.published++
		s.lastTick = ticks[0]
		ticks = ticks[1:]
	}
	// Ticks older than the catch-up window are skipped; of the others, CatchUpLatest publishes
	// the latest, and OverlapSkip too (the others would overlap it; the consumer acks at once,
	// so the previous tick's message is never held).
	var window []time.Time
	for _, t := range ticks {
		if t.Before(r.now.Add(-def.CatchUpWindow)) {
			s.skipped++
		} else {
			window = append(window, t)
		}
	}
	if len(window) > 1 && (def.CatchUp == schedule.CatchUpLatest || def.Overlap == schedule.OverlapSkip) {
		s.skipped += int64(len(window) - 1)
		window = window[len(window)-1:]
	}
	for _, t := range window {
		r.expectMsg(name, t, schedule.TickKey(name, t))
		s.published++
		s.lastTick = t
	}
	if !s.pending.IsZero() && def.Overlap == schedule.OverlapAllowAll {
		r.expectMsg(name, s.pending, schedule.TickKey(name, s.pending))
	}
}

// advance moves the Redis clock on by d; keys' lifetimes pass too.
func (r *smRun) advance(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
	r.mr.SetTime(r.now)
	r.mr.FastForward(d)
}

func (r *smRun) exec(o smOp) {
	ctx := context.Background()
	i, name := o.sched, smName(o.sched)
	s := r.scheds[i]
	notFound := func(op string, err error) {
		if s == nil && !errors.Is(err, redisdelay.ErrNotFound) {
			r.failf("api", "%s of a missing schedule: want ErrNotFound, got %v", op, err)
		}
		if s != nil && err != nil {
			r.failf("api", "%s: %v", op, err)
		}
	}
	switch o.kind {
	case smPut:
		want := schedule.Created
		switch {
		case s != nil && s.def == o.def:
			want = schedule.Unchanged
		case s != nil:
			want = schedule.Updated
		}
		got, err := r.admin.Put(ctx, smDef(name, o.def))
		if err != nil || got != want {
			r.failf("api", "put: want %s, got %s %v", want, got, err)
		}
		switch want {
		case schedule.Created:
			r.scheds[i] = &smSched{def: o.def}
			r.arm(i)
		case schedule.Updated:
			r.dropPending(i)
			s.def = o.def
			if !s.paused {
				r.arm(i)
			}
		}
	case smPause:
		changed, err := r.admin.Pause(ctx, name)
		notFound("pause", err)
		if s != nil {
			if changed != !s.paused {
				r.failf("api", "pause reported changed=%v, paused was %v", changed, s.paused)
			}
			if !s.paused {
				r.dropPending(i)
				s.paused = true
			}
		}
	case smResume:
		changed, err := r.admin.Resume(ctx, name)
		notFound("resume", err)
		if s != nil {
			if changed != s.paused {
				r.failf("api", "resume reported changed=%v, paused was %v", changed, s.paused)
			}
			if s.paused {
				s.paused = false
				r.arm(i)
			}
		}
	case smDelete:
		err := r.admin.Delete(ctx, name)
		notFound("delete", err)
		if s != nil {
			r.dropPending(i)
			r.scheds[i] = nil
		}
	case smTrigger:
		_, err := r.admin.Trigger(ctx, name)
		notFound("trigger", err)
		if s != nil {
			key := schedule.TickKey(name, r.now) + "!"
			if _, ok := r.expect[key]; !ok { // a second Trigger at the same instant is a duplicate
				r.expectMsg(name, r.now, key)
			}
		}
	case smAdvance:
		r.advance(o.d)
	case smAdvanceToTick: // exactly to the earliest pending tick: due at now, not after
		var first time.Time
		for _, s := range r.scheds {
			if s != nil && !s.pending.IsZero() && (first.IsZero() || s.pending.Before(first)) {
				first = s.pending
			}
		}
		if first.After(r.now) {
			r.advance(first.Sub(r.now))
		}
	case smRunUntilIdle:
		r.runSchedulers(o.schedulers, -1)
	case smCrash:
		r.runSchedulers(o.schedulers, o.d)
	}
}
