package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
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

// The model-based test of periodic schedules drives random sequences of schedule operations
// (Put, Pause, Resume, Delete, Trigger), interleaved with time passing on miniredis's clock and
// with Schedulers run until idle, through the public API, while a small reference model records
// which tick messages must exist: per schedule its definition, its paused flag, its pending tick
// and its counts. The model takes tick times from Schedule.NextTicks, so it does not re-implement
// cron; it implements the policies as the doc comments state them (catch-up window, CatchUpAll
// and CatchUpLatest, OverlapAllowAll storing the next tick's message ahead, OverlapSkip
// publishing at most one tick per firing, Pause, Resume and updates recomputing the next tick
// from the Redis clock's now). After each run of the Schedulers it drains the schedules' topic
// and checks every tick's message arrived exactly once, due at its nominal time, that nothing
// else arrived, that the messages stored ahead are the expected ones, and the Inspector's
// schedule.Info. At the end it deletes every schedule, drains, and checks that no key of the
// schedules is left in the tick topic's slot. A failure prints its seed and a shrunk list of
// operations that reproduces it.
//
// Time is miniredis's clock, moved by SetTime (and FastForward, so that keys expire as they
// would): a running subscription reads the Redis clock through an offset it learned at its last
// claim, so Schedulers and the draining Subscriber are started after each jump and stopped
// before the next. Each sequence runs on a miniredis of its own, so is deterministic given its
// seed.
//
// Environment:
//
//	REDISDELAY_SCHED_MODEL_OPS      operations in all (default schedModelDefaultOps)
//	REDISDELAY_SCHED_MODEL_SECONDS  no sequence starts after this many seconds (default schedModelDefaultSeconds)
//	REDISDELAY_SCHED_MODEL_SEQ_OPS  operations per sequence (default 40)
//	REDISDELAY_SCHED_MODEL_SEED     seed of the first sequence (default: the clock)
//	REDISDELAY_SCHED_MODEL_REPLAY   runs this list of operations (as printed by a failure, one a line
//	                                or separated by ';') instead of random ones
//	REDISDELAY_SCHED_MODEL_SHRINK   0 prints the whole failing sequence instead of shrinking it

var (
	schedModelDefaultOps     = 1200
	schedModelDefaultSeconds = 15
)

const (
	smSchedules = 4 // s0..s3
	smTopic     = "jobs"
	smGroup     = "worker"
	smLease     = 2 * time.Second
	smWait      = 10 * time.Second // the longest a run of the Schedulers or a drain may take
)

// smSpecs are the specs a schedule is put with: @every (counted from the previous tick) and cron
// specs with seconds, whose ticks often coincide, so that updates and re-creations hit the
// tick keys of earlier definitions.
var smSpecs = []string{"@every 10s", "*/15 * * * * *", "0 * * * * *", "@every 7s"}

// smDefs is the number of definitions: spec x overlap x catch-up x window.
const smDefs = 4 * 2 * 2 * 2

// smDef is definition i of schedule name.
func smDef(name string, i int) schedule.Schedule {
	s := schedule.Schedule{Name: name, Topic: smTopic, Spec: smSpecs[i%4], Payload: []byte(name),
		Overlap: schedule.OverlapAllowAll, CatchUp: schedule.CatchUpAll, CatchUpWindow: 30 * time.Second}
	if i/4%2 == 1 {
		s.Overlap = schedule.OverlapSkip
	}
	if i/8%2 == 1 {
		s.CatchUp = schedule.CatchUpLatest
	}
	if i/16%2 == 1 {
		s.CatchUpWindow = 45 * time.Second
	}
	return s
}

type smKind int

const (
	smPut smKind = iota
	smPause
	smResume
	smDelete
	smTrigger
	smAdvance
	smAdvanceToTick
	smRunUntilIdle
	smCrash
	smKinds
)

var smNames = [smKinds]string{"put", "pause", "resume", "delete", "trigger", "advance", "advance-to-tick", "run", "crash"}
var smWeights = [smKinds]int{16, 5, 5, 3, 4, 22, 6, 20, 4}

// smOp is one operation with its random choices drawn.
type smOp struct {
	kind       smKind
	sched      int           // s0..s3
	def        int           // put: the definition
	d          time.Duration // advance: how far; crash: how long the crashed Scheduler runs
	schedulers int           // run, crash: how many Schedulers run until idle
}

func (o smOp) String() string {
	name := fmt.Sprintf("s%d", o.sched)
	switch o.kind {
	case smPut:
		s := smDef(name, o.def)
		return fmt.Sprintf("put %s def=%d [%s %s %s %s]", name, o.def, s.Spec, s.Overlap, s.CatchUp, s.CatchUpWindow)
	case smPause, smResume, smDelete, smTrigger:
		return smNames[o.kind] + " " + name
	case smAdvance:
		return "advance " + o.d.String()
	case smAdvanceToTick:
		return "advance-to-tick"
	case smRunUntilIdle:
		return fmt.Sprintf("run schedulers=%d", o.schedulers)
	case smCrash:
		return fmt.Sprintf("crash after=%s schedulers=%d", o.d, o.schedulers)
	}
	return "?"
}

// parseSMOps reads operations as String prints them, one a line or separated by ';'.
func parseSMOps(text string) ([]smOp, error) {
	var ops []smOp
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ';' }) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		o := smOp{kind: -1}
		for k, n := range smNames {
			if n == f[0] {
				o.kind = smKind(k)
			}
		}
		if o.kind < 0 {
			return nil, fmt.Errorf("unknown operation %q", line)
		}
		for _, arg := range f[1:] {
			k, v, _ := strings.Cut(arg, "=")
			var err error
			switch {
			case strings.HasPrefix(arg, "["):
			case strings.HasPrefix(arg, "s") && v == "" && o.kind <= smTrigger:
				o.sched, err = strconv.Atoi(arg[1:])
			case k == "def":
				o.def, err = strconv.Atoi(v)
			case k == "schedulers":
				o.schedulers, err = strconv.Atoi(v)
			case k == "after":
				o.d, err = time.ParseDuration(v)
			case o.kind == smAdvance && v == "":
				o.d, err = time.ParseDuration(arg)
			}
			if err != nil {
				return nil, fmt.Errorf("operation %q: %w", line, err)
			}
			if strings.HasPrefix(arg, "[") {
				break
			}
		}
		ops = append(ops, o)
	}
	return ops, nil
}

// genSMOps draws n operations.
func genSMOps(rng *rand.Rand, n int) []smOp {
	total := 0
	for _, w := range smWeights {
		total += w
	}
	ops := make([]smOp, 0, n)
	for len(ops) < n {
		pick, k := rng.Intn(total), smKind(0)
		for ; pick >= smWeights[k]; k++ {
			pick -= smWeights[k]
		}
		o := smOp{kind: k, sched: rng.Intn(smSchedules), def: rng.Intn(smDefs), schedulers: 1 + rng.Intn(2)}
		switch k {
		case smAdvance:
			ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.Intn(hi-lo+1)) * time.Millisecond }
			switch rng.Intn(4) {
			case 0: // within one tick or so
				o.d = ms(1, 9999)
			case 1: // past several ticks, within the catch-up window
				o.d = ms(10_000, 29_999)
			case 2: // around the window's edge
				o.d = ms(30_000, 60_000)
			default: // beyond it
				o.d = ms(60_001, 300_000)
			}
		case smCrash:
			o.d = time.Duration(rng.Intn(20_000)) * time.Microsecond
		}
		ops = append(ops, o)
	}
	return ops
}

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

// smGate lets a test stop Schedulers and Subscribers between two script calls: a call that a
// stop cuts short may still run in Redis after the stop released what it held (a claim whose
// reply is lost), and its lease then expires only when the Redis clock passes it, which
// miniredis's clock does only when the test moves it. Crashes that leave a lease behind are
// TestSchedulersKilledAndRestartedPublishEachTickOnce's, on the real clock.
type smGate struct {
	mu       sync.Mutex
	closed   bool
	inflight int
}

// enter waits while the gate is closed; a call whose context ended is refused.
func (g *smGate) enter(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.mu.Lock()
		if !g.closed {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		g.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
}

func (g *smGate) leave() {
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
}

// stopBetweenCalls closes the gate, waits until no script call is under way, runs cancel, and
// opens the gate: the calls of the cancelled contexts are refused before they are sent.
func (g *smGate) stopBetweenCalls(cancel func()) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	for {
		g.mu.Lock()
		n := g.inflight
		g.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
}

func isScript(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall":
		return true
	}
	return false
}

func (g *smGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *smGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		if err := g.enter(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		defer g.leave()
		return next(ctx, cmd)
	}
}
func (g *smGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.enter(ctx); err != nil {
			return err
		}
		defer g.leave()
		return next(ctx, cmds)
	}
}

// runSMSequence runs ops on a miniredis of its own and returns the violations.
func runSMSequence(t *testing.T, seed int64, ops []smOp) []violation {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	gate := &smGate{}
	client.AddHook(gate)
	// A random instant in June 2026 (no daylight-saving change: UTC), with milliseconds.
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(seed%86_400_000) * time.Millisecond)
	mr.SetTime(start)
	r := &smRun{t: t, mr: mr, client: client, gate: gate, prefix: "smodel:", now: start, ops: ops, step: len(ops),
		expect: map[string]smExpect{}, deliveries: map[string][]smDelivery{}}
	r.admin = r.newScheduler(1)
	defer r.admin.Close()
	var err error
	if r.in, err = redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: r.prefix}, smLogger{r: r}); err != nil {
		t.Fatal(err)
	}
	// The topic's consumer group and the Schedulers' group exist before any message.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, KeyPrefix: r.prefix, ConsumerGroup: smGroup}, smLogger{r: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize(smTopic); err != nil {
		t.Fatal(err)
	}
	_ = sub.Close()
	r.registerTickGroup()
	for k, o := range ops {
		r.setStep(k)
		r.exec(o)
	}
	r.setStep(len(ops))
	r.finish()
	return r.violations
}

// shrinkSM removes operations while the sequence still fails with a violation of kind want,
// within maxRuns re-runs: the shortest failing prefix, then every op of a kind at once, then
// single ops.
func shrinkSM(t *testing.T, seed int64, ops []smOp, want string, maxRuns int) ([]smOp, []violation) {
	var lastVs []violation
	runs := 0
	fails := func(candidate []smOp) bool {
		runs++
		vs := runSMSequence(t, seed, candidate)
		if strings.Contains(","+kinds(vs)+",", ","+want+",") {
			lastVs = vs
			return true
		}
		return false
	}
	lo, hi := 0, len(ops)
	for lo+1 < hi && runs < maxRuns/3 {
		mid := (lo + hi) / 2
		if fails(ops[:mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	ops = ops[:hi]
	for k := smKind(0); k < smKinds && runs < maxRuns; k++ {
		var candidate []smOp
		for _, o := range ops {
			if o.kind != k {
				candidate = append(candidate, o)
			}
		}
		if len(candidate) < len(ops) && fails(candidate) {
			ops = candidate
		}
	}
	for i := len(ops) - 1; i >= 0 && runs < maxRuns; i-- {
		candidate := append(append([]smOp{}, ops[:i]...), ops[i+1:]...)
		if fails(candidate) {
			ops = candidate
		}
	}
	if lastVs == nil {
		lastVs = runSMSequence(t, seed, ops)
	}
	return ops, lastVs
}

// TestScheduleModelSequencesPublishWhatTheModelSays drives random sequences of schedule
// operations and time jumps through the public API on miniredis's clock and checks, after each
// run of the Schedulers, that every tick the model expects was published exactly once and
// never early, that nothing else was, that schedule.Info's state and counts agree with the
// model, and at the end that deleting every schedule leaves none of their keys.
func TestScheduleModelSequencesPublishWhatTheModelSays(t *testing.T) {
	total := envInt("REDISDELAY_SCHED_MODEL_OPS", schedModelDefaultOps)
	perSeq := envInt("REDISDELAY_SCHED_MODEL_SEQ_OPS", 40)
	seed0 := int64(envInt("REDISDELAY_SCHED_MODEL_SEED", int(time.Now().UnixNano()%1e9)))
	budget := time.Duration(envInt("REDISDELAY_SCHED_MODEL_SECONDS", schedModelDefaultSeconds)) * time.Second
	var replay []smOp
	if text := os.Getenv("REDISDELAY_SCHED_MODEL_REPLAY"); text != "" {
		var err error
		if replay, err = parseSMOps(text); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	ops, seqs := 0, 0
	for seed := seed0; ops < total && time.Since(start) < budget; seed++ {
		list := genSMOps(rand.New(rand.NewSource(seed)), perSeq)
		if replay != nil {
			list = replay
		}
		ops += len(list)
		seqs++
		vs := runSMSequence(t, seed, list)
		if len(vs) > 0 {
			reportSM(t, seed, list, vs)
			break
		}
		if replay != nil {
			break
		}
	}
	t.Logf("schedule model: seed=%d ops=%d sequences=%d in %s",
		seed0, ops, seqs, time.Since(start).Round(time.Millisecond))
	if ops < total && replay == nil {
		t.Logf("schedule model: ran %d of %d operations within the %s budget", ops, total, budget)
	}
}

// reportSM prints the violations of a failed sequence and, for its first kind of violation,
// the shortest failing list of operations found.
func reportSM(t *testing.T, seed int64, ops []smOp, vs []violation) {
	for _, v := range vs[:min(len(vs), 10)] {
		t.Logf("seed %d: %s: %s", seed, v.kind, v.text)
	}
	kind := vs[0].kind
	small, smallVs := ops, vs
	if os.Getenv("REDISDELAY_SCHED_MODEL_SHRINK") != "0" {
		small, smallVs = shrinkSM(t, seed, ops, kind, 60)
	}
	lines := make([]string, len(small))
	for i, o := range small {
		lines[i] = o.String()
	}
	detail := ""
	for _, v := range smallVs[:min(len(smallVs), 5)] {
		detail += "\n  " + v.kind + ": " + v.text
	}
	t.Errorf("schedule model: seed=%d: %s (%d violations in all: %s); shortest failing sequence, %d of %d ops "+
		"(replay: REDISDELAY_SCHED_MODEL_SEED=%d REDISDELAY_SCHED_MODEL_REPLAY='%s'):\n%s\nits violations:%s",
		seed, kind, len(vs), kinds(vs), len(small), len(ops), seed, strings.Join(lines, ";"), strings.Join(lines, "\n"), detail)
}
