//go:build chaos

package chaostest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// seedEnv set to a number replays the fault choices of an earlier run of the scheduler scenario
// (which proxy, which fault, how long; the timing of the ticks differs from run to run).
const seedEnv = "CHAOSTEST_SEED"

// Scenario 8. Three Schedulers act on one 1-second schedule, each through a fault proxy of its
// own, while random faults (blackhole, stall, latency, connection resets) hit at most two of
// the proxies at once. A fault can lose the reply of a Scheduler's publish or advance call, or
// hold its publish until after another Scheduler acted on the tick again. A consumer group of
// the schedule's topic, connected to Redis directly, must receive exactly one message per tick
// (no tick skipped, none stored twice), none before its tick time, and the schedule's counts
// must agree.
func TestSchedulersPublishEachTickOnceUnderProxyFaults(t *testing.T) {
	const schedulers = 3
	faultPeriod := short(15*time.Second, 30*time.Second)
	rig := newTickRig(t)
	proxies := make([]*faultProxy, schedulers)
	running := make([]*schedulerRun, schedulers)
	for i := range proxies {
		proxies[i] = startProxy(t, rig.srv.Addr)
		running[i] = runScheduler(t, newClient(t, proxies[i].Addr), "scheduler-"+strconv.Itoa(i), rig.logger)
	}
	rig.put(t)

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", seedEnv, s)
	}
	t.Logf("fault seed %d (%s=%d replays the fault choices)", seed, seedEnv, seed)
	faultEnd := time.Now().Add(faultPeriod)
	faults := injectFaults(rand.New(rand.NewPCG(seed, seed)), proxies, faultEnd)
	healed := time.Now()

	// Every tick up to the end of the fault period is acted on by now, or held by the lease of a
	// Scheduler that lost its connection: once a later tick arrives, each earlier one was
	// published (a tick's successor is armed only after its message was stored).
	settle := leaseTimeout + operationTimeout + 3*time.Second
	require.True(t, rig.ticks.waitFor(rig.ticks.after(faultEnd), settle), "no tick after the end of the fault period within %s of the healing", settle)
	for _, r := range running {
		r.stop(t)
	}
	stoppedAt := time.Now()
	info := rig.drain(t)

	r := rig.ticks.check(faultEnd)
	t.Logf("SUMMARY scenario=scheduler/proxy-faults seconds=%.0f faults=%s ticks_checked=%d messages=%d published=%d skipped=%d missing=%d duplicated=%d early=%d redelivered=%d lateness_p50=%s lateness_p99=%s lateness_max=%s",
		faultPeriod.Seconds(), faults, r.checked, r.messages, info.Published, info.Skipped, len(r.missing), len(r.duplicated), len(r.early), r.redelivered,
		r.p50, r.p99, r.max)
	t.Logf("adapter logged %d errors; the last tick came %s after the healing; the Schedulers stopped %s after it",
		rig.logger.Errors(), r.lastAt.Sub(healed).Round(time.Millisecond), stoppedAt.Sub(healed).Round(time.Millisecond))
	assert.GreaterOrEqual(t, r.checked, int(faultPeriod/time.Second)-1, "too few ticks in the fault period")
	r.assert(t, info)
}

// A Scheduler's publish of a tick's message is held in the network (as a stalled proxy holds
// it, or a partition TCP rides out) until after its caller gave up, the Scheduler acted on the
// tick again and the second message was consumed: longer than LeaseTimeout plus the
// TickKeyRetention (3 × LeaseTimeout by default) for which the tick's message key stays taken.
// When the held command reaches Redis, it must store nothing: the Scheduler fences its
// publishing calls on the Redis clock (see SchedulerConfig.TickKeyRetention).
func TestSchedulerPublishHeldInTheNetworkStoresNothingMore(t *testing.T) {
	rig := newTickRig(t)
	hold := leaseTimeout + 3*leaseTimeout + 3*time.Second
	held := &publishHold{topic: rig.topic, nth: 2, hold: hold, ran: make(chan heldRun, 1)}
	client := newClient(t, rig.srv.Addr)
	client.AddHook(held)
	run := runScheduler(t, client, "scheduler", rig.logger)
	rig.put(t)

	var late heldRun
	select {
	case late = <-held.ran:
	case <-time.After(hold + 10*time.Second):
		t.Fatalf("no tick publish was held within %s", hold+10*time.Second)
	}
	require.NoError(t, late.err, "the held publish, run %s late", hold)
	// A tick armed after the held command ran comes after any message it stored.
	require.True(t, rig.ticks.waitFor(rig.ticks.after(late.at.Add(time.Second)), 5*time.Second), "no tick after the held publish ran")
	run.stop(t)
	info := rig.drain(t)
	last, _ := rig.ticks.last()
	r := rig.ticks.check(last)
	t.Logf("SUMMARY scenario=scheduler/publish-held-%s ticks_checked=%d messages=%d published=%d skipped=%d missing=%d duplicated=%d early=%d",
		hold, r.checked, r.messages, info.Published, info.Skipped, len(r.missing), len(r.duplicated), len(r.early))
	r.assert(t, info)
}

// A Scheduler acts on a tick of an allow-all schedule late: the tick's message, stored ahead,
// was delivered and finished at the tick, and its key stays taken until TickKeyRetention (3 s
// here) after that. The Scheduler reads the state about 2.4 s after the tick and its publish
// (the repair of the message stored ahead, the catch-up ticks, the next tick's message) reaches
// Redis 0.9 s later, within its fence but after the key is free: the repair must not be in it,
// so the tick is stored once (scenario 8 once found it stored twice, 3 s late).
func TestSchedulerActingLateOnATickStoresItsMessageOnce(t *testing.T) {
	rig := newTickRig(t)
	rig.put(t) // no Scheduler runs yet: the first tick's message, stored ahead, is delivered alone
	first, _ := rig.ticks.last()
	delayed := &publishDelay{topic: rig.topic, delay: 900 * time.Millisecond}
	client := newClient(t, rig.srv.Addr)
	client.AddHook(delayed)
	time.Sleep(time.Until(first.Add(2350 * time.Millisecond))) // the late start is the scenario
	run := runScheduler(t, client, "scheduler", rig.logger)

	require.True(t, rig.ticks.waitFor(rig.ticks.after(first.Add(5*time.Second)), 10*time.Second), "no tick 5 s after the first")
	require.NotZero(t, delayed.landed.Load(), "no publish was delayed")
	landed := time.UnixMicro(delayed.landed.Load())
	run.stop(t)
	info := rig.drain(t)
	last, _ := rig.ticks.last()
	r := rig.ticks.check(last)
	t.Logf("SUMMARY scenario=scheduler/late-repair delayed_publish_ran=%s after the first tick ticks_checked=%d messages=%d published=%d duplicated=%d",
		landed.Sub(first).Round(time.Millisecond), r.checked, r.messages, info.Published, len(r.duplicated))
	require.True(t, landed.After(first.Add(3*time.Second)), "the delayed publish ran %s after the first tick: not after its key was free (the scenario did not happen)", landed.Sub(first))
	r.assert(t, info)
}

// publishDelay is a go-redis hook that delays the first publish.lua call to topic by delay and
// then sends it on its caller's context, recording when it was sent (Unix µs).
type publishDelay struct {
	commandHook
	topic  string
	delay  time.Duration
	seen   atomic.Int32
	landed atomic.Int64
}

func (h *publishDelay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isPublishTo(cmd.Args(), h.topic) || h.seen.Add(1) != 1 {
			return next(ctx, cmd)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.delay):
		}
		h.landed.Store(time.Now().UnixMicro())
		return next(ctx, cmd)
	}
}

// publishHold is a go-redis hook that holds the nth publish.lua call to topic (counting from
// 1) for hold: its caller sees its context end, as with a command that Redis does not answer,
// and the command reaches Redis hold after it was sent, on a context of its own.
type publishHold struct {
	commandHook
	topic string
	nth   int32
	hold  time.Duration
	seen  atomic.Int32
	ran   chan heldRun
}

// heldRun is the held command's run: when and with what error.
type heldRun struct {
	at  time.Time
	err error
}

// commandHook leaves dials and pipelines alone: a hook that embeds it acts on single commands.
type commandHook struct{}

func (commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *publishHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isPublishTo(cmd.Args(), h.topic) || h.seen.Add(1) != h.nth {
			return next(ctx, cmd)
		}
		late := redis.NewCmd(context.Background(), cmd.Args()...)
		go func() {
			time.Sleep(h.hold)
			err := next(context.Background(), late)
			h.ran <- heldRun{at: time.Now(), err: err}
		}()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.hold):
			return context.DeadlineExceeded
		}
	}
}

// isPublishTo matches a publish.lua call (EVALSHA or EVAL) on topic's keys (its second key is
// the topic's seq counter) that names one consumer group or more (its ARGV[2]).
func isPublishTo(args []any, topic string) bool {
	if len(args) < 5 {
		return false
	}
	name, _ := args[0].(string)
	if name != "evalsha" && name != "eval" {
		return false
	}
	seq, _ := args[4].(string)
	if !strings.HasSuffix(seq, ":seq") || !strings.Contains(seq, "{"+topic+"}") {
		return false
	}
	// A call that names no consumer group writes nothing once the topic has one (the script
	// returns the groups): only a call that names them stores the message.
	keys, _ := strconv.Atoi(fmt.Sprint(args[2]))
	return len(args) > 4+keys && fmt.Sprint(args[4+keys]) != "0"
}

// tickRig is one redis-server with a 1-second schedule on a topic of its own, put by an
// operator's Scheduler that never runs, and a consumer group of the topic that records and
// acks every tick message; both on a direct connection.
type tickRig struct {
	srv       *redistest.Server
	direct    *redis.Client
	topic     string
	logger    cappedLogger
	ticks     *tickLog
	consumer  *redisdelay.Subscriber
	consuming sync.WaitGroup
}

// tickSchedule is the name of the rig's schedule.
const tickSchedule = "every-second"

// newTickRig starts the server and the consumer group; the group is registered before the
// schedule exists, so no tick is parked.
func newTickRig(t *testing.T) *tickRig {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	rig := &tickRig{srv: srv, direct: newClient(t, srv.Addr), topic: newTopic(), logger: newLogger(t.Name()), ticks: newTickLog(tickSchedule)}
	// No new-group window: its parked copy of each message would keep the tick's key taken for
	// the window's minute, longer than this test, and hide what TickKeyRetention leaves.
	rig.consumer = newSubscriber(t, rig.direct, "chaos", rig.logger, func(c *redisdelay.SubscriberConfig) { c.NewGroupWindow = -1 })
	require.NoError(t, rig.consumer.SubscribeInitialize(rig.topic))
	ch, err := rig.consumer.Subscribe(context.Background(), rig.topic)
	require.NoError(t, err)
	rig.consuming.Add(1)
	go func() { defer rig.consuming.Done(); rig.ticks.consume(ch) }()
	return rig
}

// put puts the schedule and waits for its first tick.
func (rig *tickRig) put(t *testing.T) {
	t.Helper()
	admin, err := schedule.New(schedule.Config{Publisher: newTickPublisher(t, rig.direct), LeaseTimeout: leaseTimeout}, rig.logger)
	require.NoError(t, err)
	defer admin.Close()
	outcome, err := admin.Put(context.Background(), schedule.Schedule{Name: tickSchedule, Spec: "@every 1s", Topic: rig.topic, Payload: []byte("tick")})
	require.NoError(t, err)
	require.Equal(t, schedule.Created, outcome)
	require.True(t, rig.ticks.waitFor(func() bool { return rig.ticks.count() > 0 }, 5*time.Second), "no tick within 5s of Put")
}

// drain waits, once every Scheduler stopped, until the consumer group holds no tick message
// any more, closes the consumer and returns the schedule's final state.
func (rig *tickRig) drain(t *testing.T) schedule.Info {
	t.Helper()
	ctx := context.Background()
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: rig.direct, OperationTimeout: operationTimeout}, rig.logger)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		stats, err := in.Stats(ctx, rig.topic)
		if err != nil {
			return false
		}
		for _, g := range stats {
			if g.Scheduled+g.Due+g.InFlight > 0 {
				return false
			}
		}
		return true
	}, drainTimeout, 20*time.Millisecond, "tick messages still held by the consumer group")
	info, err := schedule.Get(ctx, in, tickSchedule)
	require.NoError(t, err)
	require.NoError(t, rig.consumer.Close())
	rig.consuming.Wait()
	return info
}

// newTickPublisher returns the Publisher of a Scheduler on client, with operationTimeout.
func newTickPublisher(t *testing.T, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, OperationTimeout: operationTimeout}, nil)
	require.NoError(t, err)
	return pub
}

// schedulerRun is one Scheduler's Run, in its own goroutine.
type schedulerRun struct {
	s      *schedule.Scheduler
	cancel context.CancelFunc
	done   chan error
}

func runScheduler(t *testing.T, client redis.UniversalClient, name string, logger cappedLogger) *schedulerRun {
	t.Helper()
	cfg := schedule.Config{Publisher: newTickPublisher(t, client), LeaseTimeout: leaseTimeout, Consumer: name}
	s, err := schedule.New(cfg, logger.With(map[string]any{"scheduler": name}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &schedulerRun{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = s.Close() })
	return r
}

// stop stops Run and waits for it, which finishes the ticks under way (each call bounded by
// OperationTimeout), then closes the Scheduler.
func (r *schedulerRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		require.NoError(t, err, "Scheduler.Run")
	case <-time.After(10 * time.Second):
		t.Fatal("Scheduler.Run did not return within 10s of its context's end")
	}
	require.NoError(t, r.s.Close())
}

// faultCounts counts the faults injected, by kind.
type faultCounts map[string]int

func (c faultCounts) String() string {
	return fmt.Sprintf("blackhole:%d,stall:%d,latency:%d,reset:%d", c["blackhole"], c["stall"], c["latency"], c["reset"])
}

// injectFaults injects random faults on random proxies until end, at most two proxies faulted
// at once, then heals every proxy and returns the faults injected. Each fault lasts 1-4 s
// (blackhole, stall, latency of 200 ms each way) or is a burst of connection resets
// (faultProxy.resetAll); a new one starts 0-10 ms after each tick of the 1-second schedule
// when a proxy is free.
func injectFaults(rng *rand.Rand, proxies []*faultProxy, end time.Time) faultCounts {
	const maxFaulted = 2
	var mu sync.Mutex
	faulted := make([]bool, len(proxies))
	counts := faultCounts{}
	heal := make(chan struct{}) // closed at end: every fault under way heals at once
	var wg sync.WaitGroup
	for {
		// A fault starts a few ms after a tick (the ticks are on whole seconds), while a
		// Scheduler is acting on it, so that it cuts the calls of a tick under way.
		now := time.Now()
		start := now.Truncate(time.Second).Add(time.Second + time.Duration(rng.IntN(10_000))*time.Microsecond)
		if start.After(end) {
			time.Sleep(time.Until(end))
			break
		}
		time.Sleep(start.Sub(now))
		mu.Lock()
		var free []int
		for i, f := range faulted {
			if !f {
				free = append(free, i)
			}
		}
		if len(proxies)-len(free) >= maxFaulted {
			mu.Unlock()
			continue
		}
		i := free[rng.IntN(len(free))]
		faulted[i] = true
		mu.Unlock()
		kind := []string{"blackhole", "stall", "latency", "reset"}[rng.IntN(4)]
		d := time.Duration(1000+rng.IntN(3001)) * time.Millisecond
		counts[kind]++
		p := proxies[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); faulted[i] = false; mu.Unlock() }()
			var undo func()
			switch kind {
			case "blackhole":
				undo = p.blackhole()
			case "stall":
				undo = p.stall()
			case "latency":
				undo = p.latency(200 * time.Millisecond)
			case "reset":
				p.resetAll()
				return
			}
			select {
			case <-time.After(d):
			case <-heal:
			}
			undo()
		}()
	}
	close(heal)
	wg.Wait()
	return counts
}

// tickRecord is one tick message received by the consumer group.
type tickRecord struct {
	tick time.Time // TickTimeMetadataKey
	uuid string
	at   time.Time // when the consumer received it (first delivery)
}

// tickLog records the tick messages a consumer receives. It is safe for concurrent use.
type tickLog struct {
	name        string
	mu          sync.Mutex
	records     []tickRecord // one per UUID, in order of receipt
	seen        map[string]bool
	redelivered int      // deliveries of a UUID received before (a lost ack, not a second message)
	badKey      []string // UUIDs whose message key is not TickKey(name, tick)
	unreadable  []string // UUIDs without a readable tick time
	received    chan struct{}
}

func newTickLog(name string) *tickLog {
	return &tickLog{name: name, seen: map[string]bool{}, received: make(chan struct{}, 1)}
}

// consume records and acks every message of ch until it is closed.
func (l *tickLog) consume(ch <-chan *message.Message) {
	for msg := range ch {
		at := time.Now()
		tick, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.TickTimeMetadataKey))
		l.mu.Lock()
		switch {
		case l.seen[msg.UUID]:
			l.redelivered++
		case err != nil:
			l.unreadable = append(l.unreadable, msg.UUID)
		default:
			l.seen[msg.UUID] = true
			l.records = append(l.records, tickRecord{tick: tick, uuid: msg.UUID, at: at})
			if msg.Metadata.Get(redisdelay.KeyMetadataKey) != schedule.TickKey(l.name, tick) {
				l.badKey = append(l.badKey, msg.UUID+" key "+msg.Metadata.Get(redisdelay.KeyMetadataKey))
			}
		}
		l.mu.Unlock()
		msg.Ack()
		select {
		case l.received <- struct{}{}:
		default:
		}
	}
}

func (l *tickLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// last returns the latest tick time received.
func (l *tickLog) last() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, r := range l.records {
		if r.tick.After(last) {
			last = r.tick
		}
	}
	return last, len(l.records) > 0
}

// after returns the condition that a tick later than end was received.
func (l *tickLog) after(end time.Time) func() bool {
	return func() bool { last, ok := l.last(); return ok && last.After(end) }
}

// waitFor waits up to timeout for cond, checked after each message received.
func (l *tickLog) waitFor(cond func() bool, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-l.received:
		case <-deadline:
			return cond()
		}
	}
	return true
}

// tickReport is what check found.
type tickReport struct {
	checked  int // distinct tick times from the first received to the end of the faults
	messages int // messages received (distinct UUIDs), all ticks
	// ticks holds each received message's tick time, so that the schedule's published count
	// can be compared with the messages of the ticks it has acted on.
	ticks       []time.Time
	missing     []time.Time // tick times absent between the first received and the end
	duplicated  []string    // "tick time: UUIDs" of ticks with more than one message
	early       []string    // "UUID tick time received at"
	badKey      []string
	redelivered int
	lastAt      time.Time // when the last message was received
	p50, p99    time.Duration
	max         time.Duration // lateness (receipt minus tick time) of the checked ticks
}

// check checks the ticks from the first received to end: one message each, 1 s apart, none
// received before its tick time. Duplicates and early receipts are looked for in every tick.
func (l *tickLog) check(end time.Time) tickReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := tickReport{messages: len(l.records), badKey: append(l.badKey, l.unreadable...), redelivered: l.redelivered}
	byTick := map[int64][]tickRecord{} // by tick time in Unix ms
	var first time.Time
	for _, rec := range l.records {
		tick := rec.tick.UTC()
		r.ticks = append(r.ticks, tick)
		byTick[tick.UnixMilli()] = append(byTick[tick.UnixMilli()], rec)
		if first.IsZero() || tick.Before(first) {
			first = tick
		}
		if rec.at.Before(rec.tick) {
			r.early = append(r.early, fmt.Sprintf("%s tick %s received %s", rec.uuid, tick.Format(time.RFC3339Nano), rec.at.UTC().Format(time.RFC3339Nano)))
		}
		if rec.at.After(r.lastAt) {
			r.lastAt = rec.at
		}
	}
	var lateness []time.Duration
	for tick := first; !tick.After(end); tick = tick.Add(time.Second) {
		recs, ok := byTick[tick.UnixMilli()]
		if !ok {
			r.missing = append(r.missing, tick)
			continue
		}
		r.checked++
		lateness = append(lateness, recs[0].at.Sub(tick))
	}
	for _, recs := range byTick {
		if len(recs) > 1 {
			uuids := make([]string, len(recs))
			for i, rec := range recs {
				uuids[i] = rec.uuid + " (received " + rec.at.Sub(rec.tick).Round(time.Millisecond).String() + " late)"
			}
			r.duplicated = append(r.duplicated, recs[0].tick.UTC().Format(time.RFC3339Nano)+": "+fmt.Sprint(uuids))
		}
	}
	slices.Sort(r.duplicated)
	if len(lateness) > 0 {
		slices.Sort(lateness)
		at := func(q float64) time.Duration {
			return lateness[int(q*float64(len(lateness)-1))].Round(time.Millisecond)
		}
		r.p50, r.p99, r.max = at(0.5), at(0.99), lateness[len(lateness)-1].Round(time.Millisecond)
	}
	return r
}

// assert asserts the report and the schedule's counts: every checked tick stored once, none
// early, every message with its tick's key, none skipped, one published per message of a tick
// the schedule has acted on (with OverlapAllowAll the next tick's message is stored ahead, and
// counted once its tick is acted on).
func (r tickReport) assert(t *testing.T, info schedule.Info) {
	t.Helper()
	assert.Empty(t, r.missing, "ticks without a message")
	assert.Empty(t, r.duplicated, "ticks stored more than once (tick time: UUIDs)")
	assert.Empty(t, r.early, "messages received before their tick time")
	assert.Empty(t, r.badKey, "messages whose key is not TickKey(name, tick time)")
	assert.Zero(t, info.Skipped, "ticks the schedule counts as skipped")
	actedOn := 0
	for _, tick := range r.ticks {
		if !tick.After(info.LastTick) {
			actedOn++
		}
	}
	assert.Equal(t, int64(actedOn), info.Published, "the schedule's published count against the messages of the ticks up to its last (%s)", info.LastTick.UTC())
}
