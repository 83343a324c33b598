package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
)

// sizes holds the message counts and durations of one run (full or -quick).
type sizes struct {
	publishN, batchN      int           // publish figures: messages per system (or until publishCap)
	publishCap            time.Duration // time cap per publish figure
	consumeN              int           // consume figures: messages pre-published
	consumeCap            time.Duration // time cap of one consume run
	asynqConsumeN         int           // asynq pre-enqueued tasks (it enqueues one task per call)
	lateN                 int
	latePublish, lateMaxD time.Duration
	lateSubs              int
	burstN                int
	burstSubs             int
	idleTopics, idleSubs  int
	idleWindow            time.Duration
	tickSchedules         int
	tickWindow            time.Duration
	scaleN                int // scheduled messages for the memory / claim figures
	scaleSmallN           int
	scaleDueN             int
	asynqMemN             int // asynq scheduled tasks for its memory figure (0 = skip)
}

var fullSizes = sizes{
	publishN: 100_000, batchN: 200_000, publishCap: 5 * time.Second,
	consumeN: 200_000, consumeCap: 20 * time.Second, asynqConsumeN: 200_000,
	lateN: 20_000, latePublish: 5 * time.Second, lateMaxD: 5 * time.Second, lateSubs: 1,
	burstN: 1_000_000, burstSubs: 1,
	idleTopics: 100, idleSubs: 10, idleWindow: 10 * time.Second,
	tickSchedules: 10, tickWindow: 30 * time.Second,
	scaleN: 10_000_000, scaleSmallN: 1_000, scaleDueN: 100_000,
	asynqMemN: 100_000,
}

var quickSizes = sizes{
	publishN: 5_000, batchN: 10_000, publishCap: 2 * time.Second,
	consumeN: 5_000, consumeCap: 5 * time.Second, asynqConsumeN: 5_000,
	lateN: 1_000, latePublish: time.Second, lateMaxD: time.Second, lateSubs: 1,
	burstN: 20_000, burstSubs: 1,
	idleTopics: 10, idleSubs: 3, idleWindow: 2 * time.Second,
	tickSchedules: 3, tickWindow: 4 * time.Second,
	scaleN: 20_000, scaleSmallN: 1_000, scaleDueN: 5_000,
	asynqMemN: 5_000,
}

// bench is the state shared by all scenarios of a run.
type bench struct {
	addr     string
	admin    *redis.Client
	canFlush bool
	runID    string
	sz       sizes
	res      *results
	stats    bool // -redis-stats
	payload  []byte
}

func (b *bench) topic(name string) string { return "bench-" + b.runID + "-" + name }

// reset empties Redis between scenarios when allowed; otherwise topics carry the run ID.
func (b *bench) reset() error {
	if !b.canFlush {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.admin.FlushAll(ctx).Err()
}

// publishN publishes total messages from workers goroutines, batch messages per call, until
// all are published or cap passes. It returns how many were published and the time taken.
func publishN(prod producer, topic string, total, workers, batch int, capDur time.Duration, mk func(seq int) item) (int, time.Duration, error) {
	return publishWithProgress([]producer{prod}, topic, total, workers, batch, capDur, mk, "")
}

func (b *bench) plainItem(seq int) item { return item{seq: seq, payload: b.payload} }

// ---- publish figures ----

func (b *bench) runPublish(sys system, batched bool) error {
	if batched {
		return b.publishFigure(sys, "publish_batched", "cpu_publish_100", "publish-batched", b.sz.batchN, 16, 100)
	}
	if err := b.publishFigure(sys, "publish", "cpu_publish_1", "publish", b.sz.publishN, 16, 1); err != nil {
		return err
	}
	// The same with 64 goroutines, as watermill-benchmark publishes (see cpu.go).
	return b.publishFigure(sys, "publish_64", "", "publish-64", b.sz.publishN, 64, 1)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// ---- consume + ack ----

// counter counts deliveries and records when the target was reached.
type counter struct {
	target int64
	n      atomic.Int64
	once   sync.Once
	doneAt time.Time
	done   chan struct{}
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), done: make(chan struct{})}
}

func (c *counter) add() {
	if c.n.Add(1) == c.target {
		c.once.Do(func() { c.doneAt = time.Now(); close(c.done) })
	}
}

// wait waits for the target or the deadline; it returns the count and when it stopped.
func (c *counter) wait(deadline time.Time) (int, time.Time, bool) {
	select {
	case <-c.done:
		return int(c.target), c.doneAt, true
	case <-time.After(time.Until(deadline)):
		return int(c.n.Load()), time.Now(), false
	}
}

func (b *bench) runConsume(sys system) error {
	var rates [2]float64
	claimAck := -1.0 // cpu_claim_ack of this round, µs/msg; < 0 when not measured
	for i, subs := range []int{1, 4} {
		if err := b.reset(); err != nil {
			return err
		}
		topic := b.topic(fmt.Sprintf("consume-%d", subs))
		if err := initialize(sys, b.addr, topic); err != nil {
			return err
		}
		total := b.sz.consumeN
		if sys.name() == sysAsynq {
			total = b.sz.asynqConsumeN
		}
		prod, err := sys.newProducer(b.addr)
		if err != nil {
			return err
		}
		progress("  %s: pre-publishing %d messages", sys.name(), total)
		n, took, err := publishN(prod, topic, total, 16, 100, 10*time.Minute, b.plainItem)
		prod.close()
		if err != nil {
			return err
		}
		progress("  %s: pre-published %d in %s; consuming with %d subscriber(s)", sys.name(), n, took.Round(time.Millisecond), subs)

		cnt := newCounter(total)
		inst, workers := sys.group(subs)
		w := b.watch()
		meter := b.cpuMeter(sys.name())
		start := time.Now()
		stop, err := sys.startConsumers(b.addr, consumerSpec{
			topics: []string{topic}, instances: inst, workers: workers,
			handle: func(delivery) { cnt.add() },
		})
		if err != nil {
			return err
		}
		got, end, complete := cnt.wait(start.Add(b.sz.consumeCap))
		w(fmt.Sprintf("%s consume %d", sys.name(), subs))
		stop()
		if subs == 1 {
			claimAck = b.setClaimAckCPU(sys, meter, got)
		}
		rates[i] = float64(got) / end.Sub(start).Seconds()
		note := ""
		if !complete {
			note = fmt.Sprintf("time-capped: %d of %d in %s", got, total, b.sz.consumeCap)
		}
		if total != b.sz.consumeN {
			note = joinNote(note, fmt.Sprintf("%d tasks pre-enqueued", total))
		}
		if sys.name() == sysAsynq {
			note = joinNote(note, fmt.Sprintf("1 Server, Concurrency %d", subs))
		}
		b.res.set(fmt.Sprintf("consume_%d", subs), sys.name(), rates[i], note)
		progress("  %s: %d subscriber(s): %.0f msg/s", sys.name(), subs, rates[i])
	}
	b.res.set("consume_scaling", sys.name(), rates[1]/rates[0], "")
	return b.runNackCost(sys, claimAck) // cpu_nack, nack.go
}

// ---- delayed delivery lateness ----

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3) // µs
}

func (b *bench) runLateness(sys system) error {
	return b.measureLateness(sys, "lateness", nil)
}

// measureLateness runs the lateness measurement and records its figures under prefix
// (prefix_p50, ...). When load is not nil it is started once the subscribers have settled,
// before the first publish, and the function it returns is called (once) when the last message
// is delivered or the wait gives up; that function stops the load and returns a note for the
// figures.
func (b *bench) measureLateness(sys system, prefix string, load func() (stop func() string)) error {
	if err := b.reset(); err != nil {
		return err
	}
	topic := b.topic(prefix)
	rec := newLateRecorder(b.sz.lateN)
	inst, workers := sys.group(b.sz.lateSubs)
	stop, err := sys.startConsumers(b.addr, consumerSpec{topics: []string{topic}, instances: inst, workers: workers, handle: rec.handle})
	if err != nil {
		return err
	}
	defer stop()
	// Let the subscribers settle (redisdelay: wake-up channel confirmed; asynq: server up).
	time.Sleep(500 * time.Millisecond)
	var stopLoad func() string
	if load != nil {
		stopLoad = load()
		defer func() {
			if stopLoad != nil {
				stopLoad()
			}
		}()
	}
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	defer prod.close()
	w := b.watch()
	start := time.Now()
	if err := b.publishLate(prod, topic, start); err != nil {
		return err
	}
	pubTook := time.Since(start)
	got, _, complete := rec.cnt.wait(time.Now().Add(b.sz.lateMaxD + 15*time.Second))
	w(sys.name() + " " + prefix + " (publish + deliver)")

	loadNote := ""
	if stopLoad != nil {
		loadNote, stopLoad = stopLoad(), nil
	}
	rec.report(b, sys, prefix, joinNote(b.lateNote(sys, pubTook, got, complete), loadNote))
	return nil
}

// lateNote is the note of a lateness measurement: its subscribers, and whether publishing fell
// behind its plan or messages were left undelivered.
func (b *bench) lateNote(sys system, pubTook time.Duration, got int, complete bool) string {
	note := fmt.Sprintf("%d subscriber(s)", b.sz.lateSubs)
	if sys.name() == sysAsynq {
		note = fmt.Sprintf("Concurrency %d, default DelayedTaskCheckInterval 5s", b.sz.lateSubs)
	}
	if pubTook > b.sz.latePublish+b.sz.latePublish/10 {
		note = joinNote(note, fmt.Sprintf("publishing took %s, planned %s", pubTook.Round(time.Millisecond), b.sz.latePublish))
	}
	if !complete {
		note = joinNote(note, fmt.Sprintf("only %d of %d delivered", got, b.sz.lateN))
	}
	return note
}

// lateRecorder collects the lateness of first deliveries: handler start minus the due time the
// publisher recorded.
type lateRecorder struct {
	mu    sync.Mutex
	hist  *hdrhistogram.Histogram
	early int
	seen  *dedup
	cnt   *counter
}

func newLateRecorder(total int) *lateRecorder {
	return &lateRecorder{hist: newHist(), seen: newDedup(total), cnt: newCounter(total)}
}

func (r *lateRecorder) handle(d delivery) {
	late := d.at.UnixNano() - d.due
	r.mu.Lock()
	if !r.seen.first(d.seq) {
		r.mu.Unlock()
		return
	}
	if late < 0 {
		r.early++
	}
	_ = r.hist.RecordValue(max(late, 0) / int64(time.Microsecond))
	r.mu.Unlock()
	r.cnt.add()
}

// report records prefix_p50, _p99, _p999, _max and _early for sys.
func (r *lateRecorder) report(b *bench, sys system, prefix, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen.dups > 0 {
		note = joinNote(note, fmt.Sprintf("%d duplicate deliveries ignored", r.seen.dups))
	}
	ms := func(q float64) float64 { return float64(r.hist.ValueAtQuantile(q)) / 1000 }
	maxMs := float64(r.hist.Max()) / 1000
	b.res.set(prefix+"_p50", sys.name(), ms(50), note)
	b.res.set(prefix+"_p99", sys.name(), ms(99), "")
	b.res.set(prefix+"_p999", sys.name(), ms(99.9), "")
	b.res.set(prefix+"_max", sys.name(), maxMs, "")
	b.res.set(prefix+"_early", sys.name(), float64(r.early), "")
	progress("  %s: %s p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms, early %d", sys.name(), prefix, ms(50), ms(99), ms(99.9), maxMs, r.early)
}

// publishLate publishes sz.lateN messages with random delays in [0, sz.lateMaxD): message i at
// start + i*interval, from 4 paced goroutines, each recording its due time as time.Now()+delay
// just before its Publish.
func (b *bench) publishLate(prod producer, topic string, start time.Time) error {
	const publishers = 4
	total := b.sz.lateN
	interval := b.sz.latePublish / time.Duration(total)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := g; i < total; i += publishers {
				if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
					time.Sleep(w)
				}
				d := time.Duration(rng.Int64N(int64(b.sz.lateMaxD)))
				it := item{seq: i, payload: b.payload, delay: d, due: time.Now().Add(d).UnixNano()}
				if err := prod.publish(context.Background(), topic, []item{it}); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// ---- due burst ----

func (b *bench) runBurst(sys system) error {
	if err := b.reset(); err != nil {
		return err
	}
	topic := b.topic("burst")
	total := b.burstCount(sys) // burst1m.go
	if total == 0 {
		b.res.note("due_burst / %s: skipped (-asynq-burst-n 0)", sys.name())
		return nil
	}
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	defer prod.close()

	// Probe the publishing rate (to a topic nobody consumes, due in a day), to choose a due
	// time that publishing all messages comfortably precedes.
	probeN := max(total/50, 500)
	far := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	n, took, err := publishN(prod, b.topic("burst-probe"), probeN, 16, 100, time.Minute, func(seq int) item {
		return item{seq: seq, payload: b.payload, until: far}
	})
	if err != nil {
		return err
	}
	lead := time.Duration(float64(took)*float64(total)/float64(n)*1.5) + 2*time.Second
	due := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
	dueNs := due.UnixNano()

	var (
		mu    sync.Mutex
		early int
		first time.Time
		seen  = newDedup(total)
	)
	cnt := newCounter(total)
	inst, workers := sys.group(b.sz.burstSubs)
	stop, err := sys.startConsumers(b.addr, consumerSpec{
		topics: []string{topic}, instances: inst, workers: workers,
		handle: func(d delivery) {
			mu.Lock()
			if !seen.first(d.seq) {
				mu.Unlock()
				return
			}
			if d.at.UnixNano() < dueNs {
				early++
			}
			if first.IsZero() {
				first = d.at
			}
			mu.Unlock()
			cnt.add()
		},
	})
	if err != nil {
		return err
	}
	defer stop()

	progress("  %s: publishing %d messages due at %s (in %s)", sys.name(), total, due.Format("15:04:05"), time.Until(due).Round(time.Millisecond))
	_, pubTook, err := publishN(prod, topic, total, 16, 100, lead+time.Minute, func(seq int) item {
		return item{seq: seq, payload: b.payload, until: due, due: dueNs}
	})
	if err != nil {
		return err
	}
	pubEnd := time.Now()
	time.Sleep(time.Until(due))
	w := b.watch()
	got, end, complete := cnt.wait(due.Add(burstCap(sys)))
	w(sys.name() + " burst")
	mu.Lock()
	defer mu.Unlock()
	note := fmt.Sprintf("%d subscribers; published in %s; first delivery %+.1f ms after due", b.sz.burstSubs, pubTook.Round(time.Millisecond), float64(first.Sub(due))/1e6)
	if sys.name() == sysAsynq {
		note = fmt.Sprintf("Concurrency %d; published in %s; first delivery %+.1f ms after due", b.sz.burstSubs, pubTook.Round(time.Millisecond), float64(first.Sub(due))/1e6)
	}
	if pubEnd.After(due) {
		note = joinNote(note, fmt.Sprintf("INVALID: publishing ended %s after the due time", pubEnd.Sub(due).Round(time.Millisecond)))
	}
	if !complete {
		note = joinNote(note, fmt.Sprintf("only %d of %d delivered within %s", got, total, burstCap(sys)))
	}
	if early > 0 {
		note = joinNote(note, fmt.Sprintf("%d delivered before due", early))
	}
	if seen.dups > 0 {
		note = joinNote(note, fmt.Sprintf("%d duplicates ignored", seen.dups))
	}
	took2 := end.Sub(due)
	b.setBurst(sys, total, got, complete, took2, early, note) // burst1m.go
	progress("  %s: %d delivered %s after due", sys.name(), got, took2.Round(time.Millisecond))
	return nil
}

// ---- idle cost ----

func (b *bench) runIdle(sys system) error {
	if err := b.reset(); err != nil {
		return err
	}
	topics := make([]string, b.sz.idleTopics)
	for i := range topics {
		topics[i] = b.topic(fmt.Sprintf("idle-%03d", i))
	}
	cnt := newCounter(len(topics))
	stop, err := sys.startConsumers(b.addr, consumerSpec{
		topics: topics, instances: b.sz.idleSubs, workers: 1,
		handle: func(delivery) { cnt.add() },
	})
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(time.Second)

	// Warm-up: one message per topic, so that every system is past its start-up path.
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	for i, t := range topics {
		if err := prod.publish(context.Background(), t, []item{b.plainItem(i)}); err != nil {
			prod.close()
			return err
		}
	}
	prod.close()
	if got, _, ok := cnt.wait(time.Now().Add(30 * time.Second)); !ok {
		return fmt.Errorf("warm-up: only %d of %d delivered", got, len(topics))
	}
	time.Sleep(2 * time.Second)

	ctx := context.Background()
	w := b.watch() // outside the counted window
	cmds, peak, err := commandRates(ctx, b.admin, b.sz.idleWindow)
	if err != nil {
		return err
	}
	w(sys.name() + " idle")
	subs := len(topics) * b.sz.idleSubs
	var note string
	switch sys.name() {
	case sysRedisDelay:
		note = fmt.Sprintf("%d Subscriber instances x %d topics = %d subscriptions, one group; Lua-internal commands count", b.sz.idleSubs, len(topics), subs)
	case sysRedisStream:
		note = fmt.Sprintf("%d Subscriber instances x %d topics = %d subscriptions, one group; default config", b.sz.idleSubs, len(topics), subs)
	case sysAsynq:
		note = fmt.Sprintf("closest setup: %d Servers x %d queues, Concurrency 1 each; per subscriber = / %d server-queue pairs", b.sz.idleSubs, len(topics), subs)
	}
	b.res.set("idle_total", sys.name(), cmds, note)
	b.res.set("idle_per_sub", sys.name(), cmds/float64(subs), "")
	b.res.set("idle_peak_ratio", sys.name(), peak/cmds, fmt.Sprintf("busiest second %.0f commands, average %.0f/s", peak, cmds))
	progress("  %s: %.1f commands/s total, %.3f per subscriber, busiest second %.0f (%.2fx the average)", sys.name(), cmds, cmds/float64(subs), peak, peak/cmds)
	return nil
}

// ---- scale ----

func (b *bench) usedMemory() (int64, error) {
	return info(context.Background(), b.admin, "memory", "used_memory")
}

// measureMemory publishes n messages due in a year to topic and returns used_memory delta / n.
func (b *bench) measureMemory(sys system, topic string, n int) (float64, error) {
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return 0, err
	}
	defer prod.close()
	// Create the topic's keys first so that the fixed cost is not counted.
	if _, _, err := publishN(prod, topic, 1, 1, 1, time.Minute, b.futureItem); err != nil {
		return 0, err
	}
	before, err := b.usedMemory()
	if err != nil {
		return 0, err
	}
	got, took, err := publishN(prod, topic, n, 16, 100, 10*time.Minute, b.futureItem)
	if err != nil {
		return 0, err
	}
	progress("  %s: %d scheduled in %s", sys.name(), got, took.Round(time.Millisecond))
	after, err := b.usedMemory()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(got), nil
}

func (b *bench) futureItem(seq int) item {
	return item{seq: seq, payload: b.payload, delay: 365 * 24 * time.Hour}
}

// claimRounds is how often each claim figure is measured; the best round counts, since on a
// shared machine interference only ever slows a round down.
const claimRounds = 3

// alternateClaimRates runs claimRate claimRounds times on each topic, the topics in turn within
// each round, and returns each topic's rates and Redis CPU per message, round by round.
func (b *bench) alternateClaimRates(sys system, topics []string, dueN int) ([][]float64, [][]float64, error) {
	rates, cpus := make([][]float64, len(topics)), make([][]float64, len(topics))
	for range claimRounds {
		for i, topic := range topics {
			r, c, err := b.claimRate(sys, topic, dueN)
			if err != nil {
				return nil, nil, err
			}
			rates[i], cpus[i] = append(rates[i], r), append(cpus[i], c)
		}
	}
	return rates, cpus, nil
}

// fmtCPUs formats Redis CPU figures in µs per message.
func fmtCPUs(cpus []float64) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = fmt.Sprintf("%.2f", c)
	}
	return strings.Join(parts, ", ")
}

func fmtRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, ", ")
}

// claimRate publishes dueN messages due now to topic (which already holds scheduled ones),
// consumes them with one subscriber and returns the rate (msg/s) and the Redis CPU per message
// (µs, the counted commands' commandstats usec; see cpu.go).
func (b *bench) claimRate(sys system, topic string, dueN int) (float64, float64, error) {
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return 0, 0, err
	}
	_, _, err = publishN(prod, topic, dueN, 16, 100, 10*time.Minute, b.plainItem)
	prod.close()
	if err != nil {
		return 0, 0, err
	}
	cnt := newCounter(dueN)
	inst, workers := sys.group(1)
	w := b.watch()
	cpu := b.cpuMeter(sys.name())
	start := time.Now()
	stop, err := sys.startConsumers(b.addr, consumerSpec{
		topics: []string{topic}, instances: inst, workers: workers,
		handle: func(delivery) { cnt.add() },
	})
	if err != nil {
		return 0, 0, err
	}
	got, end, ok := cnt.wait(start.Add(2 * b.sz.consumeCap))
	w(sys.name() + " claim " + topic)
	stop()
	if !ok {
		return 0, 0, fmt.Errorf("only %d of %d consumed", got, dueN)
	}
	cost, err := cpu.done()
	if err != nil {
		return 0, 0, err
	}
	return float64(got) / end.Sub(start).Seconds(), cost.usec / float64(got), nil
}

func (b *bench) runScale(sys system) error {
	switch sys.name() {
	case sysRedisStream:
		return nil // no scheduled messages: n/a
	case sysAsynq:
		if b.sz.asynqMemN == 0 {
			return nil
		}
		if err := b.reset(); err != nil {
			return err
		}
		per, err := b.measureMemory(sys, b.topic("scale"), b.sz.asynqMemN)
		if err != nil {
			return err
		}
		note := fmt.Sprintf("measured with %d scheduled tasks (cheaper than 1M at its enqueue rate); task payload = 16 B bench header + 100 B", b.sz.asynqMemN)
		b.res.set("mem_per_msg", sys.name(), per, note)
		b.res.set("mem_beyond_payload", sys.name(), per-float64(len(b.payload)), "")
		progress("  %s: %.0f B per scheduled task", sys.name(), per)
		return nil
	}

	return b.scaleRedisDelay(sys) // scale10m.go
}

// storedSize is the size of the blob redisdelay stores for a scale message.
func storedSize(b *bench) int {
	msg := message.NewMessage("0b0c1d2e-3f40-4152-8364-758697a8b9ca", b.payload)
	delay.Message(msg, delay.For(365*24*time.Hour))
	data, err := redisdelay.DefaultMarshalerUnmarshaler{}.Marshal("t", msg)
	if err != nil {
		return 0
	}
	return len(data)
}

// watch starts a -redis-stats measurement; the returned func prints it with label.
func (b *bench) watch() func(label string) {
	if !b.stats {
		return func(string) {}
	}
	ctx := context.Background()
	before, err := snapshotStats(ctx, b.admin)
	selfBefore := selfCPU()
	start := time.Now()
	return func(label string) {
		after, err2 := snapshotStats(ctx, b.admin)
		if err != nil || err2 != nil {
			return
		}
		wall := time.Since(start)
		progress("  [redis-stats] %s: benchmark process CPU %.0f%% of one core; %s", label,
			100*(selfCPU()-selfBefore).Seconds()/wall.Seconds(), after.describe(before, wall))
	}
}

// selfCPU is the user+system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dedup remembers which message sequence numbers in [0, n) were delivered and counts repeats.
// It is not safe for concurrent use: callers hold their own lock.
type dedup struct {
	seen []bool
	dups int
}

func newDedup(n int) *dedup { return &dedup{seen: make([]bool, n)} }

// first reports whether seq is delivered for the first time, counting it as a duplicate if not.
// Sequence numbers outside [0, n) are not tracked and always count as first.
func (d *dedup) first(seq int) bool {
	if seq < 0 || seq >= len(d.seen) {
		return true
	}
	if d.seen[seq] {
		d.dups++
		return false
	}
	d.seen[seq] = true
	return true
}
