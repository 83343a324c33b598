package main

// The scale scenario: -scale-n (10M) messages scheduled a year ahead on one topic with one
// consumer group, publishing time, memory per message, Redis RSS, and claim throughput with
// 1k vs N scheduled on the same topic and group. See README.md.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	scaleNFlag       = flag.Int("scale-n", 10_000_000, "scale: messages scheduled a year ahead (with -quick: 20,000 unless given)")
	compactHorizon   = flag.Duration("compact-horizon", 0, "redisdelay PublisherConfig.CompactHorizon (0 = library default; negative = no compact tier: messages far ahead go to the due set, as before it existed)")
	scaleBatchFlag   = flag.Int("scale-batch", 100, "scale: messages per Publish call while scheduling")
	scaleWorkersFlag = flag.Int("scale-workers", 16, "scale: publishing goroutines while scheduling")
	scalePubsFlag    = flag.Int("scale-publishers", 1, "scale: Publisher instances (each on its own client) the goroutines share while scheduling")
)

// flagGiven reports whether the named flag was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

// scaleN is the number of messages the scale scenario schedules: -scale-n when given, else
// the run's size (10M full, 20k with -quick).
func (b *bench) scaleN() int {
	if flagGiven("scale-n") {
		return max(*scaleNFlag, 1)
	}
	return b.sz.scaleN
}

// scaleCap bounds the scheduling of n messages: generous, since the target is 60 s for 10M.
func scaleCap(n int) time.Duration {
	return 2*time.Minute + time.Duration(n/10_000)*time.Second // 10M: about 19 min
}

// publishWithProgress is publishN over several producers (worker w uses prods[w % len]), with a
// progress line every 10 s for long runs unless label is empty.
func publishWithProgress(prods []producer, topic string, total, workers, batch int, capDur time.Duration, mk func(seq int) item, label string) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), capDur+30*time.Second)
	defer cancel()
	var (
		next, done atomic.Int64
		firstErr   error
		errOnce    sync.Once
		wg         sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(capDur)
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if label == "" {
			<-stopProgress
			return
		}
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				n := done.Load()
				progress("  %s: %d of %d published (%.0f msg/s)", label, n, total, float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	for w := range workers {
		prod := prods[w%len(prods)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]item, 0, batch)
			for time.Now().Before(deadline) {
				first := int(next.Add(int64(batch))) - batch
				if first >= total {
					return
				}
				items = items[:0]
				for seq := first; seq < min(first+batch, total); seq++ {
					items = append(items, mk(seq))
				}
				if err := prod.publish(ctx, topic, items); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				done.Add(int64(len(items)))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stopProgress)
	<-progressDone
	return int(done.Load()), took, firstErr
}

// infoFields returns the "key:value" fields of INFO sections.
func redisInfoFields(ctx context.Context, b *bench, sections ...string) (map[string]string, error) {
	text, err := b.admin.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// startedServer reports whether this program started the Redis it uses (REDIS_ADDR unset), so
// that the process is on this machine and /proc describes it.
func startedServer() bool { return os.Getenv("REDIS_ADDR") == "" }

// procStatusKB returns a "kB" field of /proc/<pid>/status (VmRSS, VmHWM) or /proc/meminfo
// (pid 0: MemAvailable), in bytes.
func procStatusKB(pid int, field string) (int64, error) {
	path := "/proc/meminfo"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n * 1024, err
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
}

// checkRoomFor fails early when n scheduled messages would not fit: a maxmemory below what
// they need, or (for a server this program started) less available memory on the machine.
func (b *bench) checkRoomFor(n int) error {
	const perMsg = 400 // B: ~260 B stored per message, plus rehashing tables and allocator slack
	need := int64(n) * perMsg
	ctx := context.Background()
	if v, err := b.admin.ConfigGet(ctx, "maxmemory").Result(); err == nil {
		if mm, _ := strconv.ParseInt(v["maxmemory"], 10, 64); mm > 0 && mm < need {
			return fmt.Errorf("redis maxmemory is %d MiB; %d scheduled messages need about %d MiB (lower -scale-n or raise maxmemory)", mm>>20, n, need>>20)
		}
	}
	if startedServer() {
		if avail, err := procStatusKB(0, "MemAvailable"); err == nil && avail < need+need/4 {
			return fmt.Errorf("MemAvailable is %d MiB; %d scheduled messages need about %d MiB in redis-server (lower -scale-n)", avail>>20, n, need>>20)
		}
	}
	return nil
}

// dropBig removes the big topic: FLUSHALL where allowed, else its keys. A client of its own with
// a long read timeout, since freeing 10M entries blocks Redis for seconds.
func (b *bench) dropBig(topic string) error {
	c := redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: 1, ReadTimeout: 5 * time.Minute})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if b.canFlush {
		return c.FlushAll(ctx).Err()
	}
	it := c.Scan(ctx, 0, "*{"+topic+"}*", 1000).Iterator()
	for it.Next(ctx) {
		if err := c.Del(ctx, it.Val()).Err(); err != nil {
			return err
		}
	}
	return it.Err()
}

// scaleRedisDelay is the redisdelay part of the scale scenario.
func (b *bench) scaleRedisDelay(sys system) error {
	n := b.scaleN()
	if err := b.reset(); err != nil {
		return err
	}
	if err := b.checkRoomFor(n); err != nil {
		return err
	}
	ctx := context.Background()
	big := b.topic("scale-big")
	// One consumer group registered before publishing, as a user would.
	if err := initialize(sys, b.addr, big); err != nil {
		return err
	}
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	// Create the topic's keys first so that the fixed cost is not counted.
	if _, _, err := publishN(prod, big, 1, 1, 1, time.Minute, b.futureItem); err != nil {
		prod.close()
		return err
	}
	batch, workers, npubs := max(*scaleBatchFlag, 1), max(*scaleWorkersFlag, 1), max(*scalePubsFlag, 1)
	prods := []producer{prod}
	var closeOnce sync.Once
	closeProds := func() {
		closeOnce.Do(func() {
			for _, p := range prods {
				p.close()
			}
		})
	}
	defer closeProds()
	for len(prods) < npubs {
		p, err := sys.newProducer(b.addr)
		if err != nil {
			return err
		}
		prods = append(prods, p)
	}
	before, err := redisInfoFields(ctx, b, "memory")
	if err != nil {
		return err
	}
	progress("  %s: scheduling %d messages a year ahead, %d per Publish, %d goroutines, %d Publisher(s)", sys.name(), n, batch, workers, npubs)
	w := b.watch()
	got, took, err := publishWithProgress(prods, big, n, workers, batch, scaleCap(n), b.futureItem, sys.name()+" scale")
	w(fmt.Sprintf("%s schedule %d", sys.name(), n))
	closeProds()
	if err != nil {
		return err
	}
	progress("  %s: %d scheduled in %s (%.0f msg/s)", sys.name(), got, took.Round(time.Millisecond), float64(got)/took.Seconds())
	after, err := redisInfoFields(ctx, b, "memory", "server")
	if err != nil {
		return err
	}
	num := func(m map[string]string, k string) float64 { v, _ := strconv.ParseFloat(m[k], 64); return v }
	per := (num(after, "used_memory") - num(before, "used_memory")) / float64(got)
	stored := storedSize(b)

	pubNote := fmt.Sprintf("%d messages of 100 B a year ahead, %d per Publish, %d goroutines, %d Publisher(s), one group registered; %.0f msg/s", got, batch, workers, npubs, float64(got)/took.Seconds())
	if got < n {
		pubNote = joinNote(pubNote, fmt.Sprintf("INVALID: time-capped at %d of %d", got, n))
	}
	b.res.set("publish_10m_seconds", sys.name(), took.Seconds(), pubNote)
	b.res.set("mem_per_msg", sys.name(), per, fmt.Sprintf("%d scheduled; stored message blob %d B (100 B payload + UUID + delay metadata), so %.0f B beyond the blob; used_memory %.0f MiB", got, stored, per-float64(stored), num(after, "used_memory")/(1<<20)))
	b.res.set("mem_beyond_payload", sys.name(), per-float64(len(b.payload)), "")
	rss := num(after, "used_memory_rss")
	b.res.set("redis_used_memory_rss_mib", sys.name(), rss/(1<<20), fmt.Sprintf("INFO memory after scheduling %d; mem_fragmentation_ratio %s, allocator_frag_ratio %s", got, after["mem_fragmentation_ratio"], after["allocator_frag_ratio"]))
	progress("  %s: %.0f B per scheduled message (blob %d B, %.0f B beyond the payload); used_memory_rss %.0f MiB", sys.name(), per, stored, per-float64(len(b.payload)), rss/(1<<20))
	if startedServer() {
		pid, _ := strconv.Atoi(after["process_id"])
		if vm, err := procStatusKB(pid, "VmRSS"); err == nil {
			hwm, _ := procStatusKB(pid, "VmHWM")
			b.res.set("redis_vmrss_mib", sys.name(), float64(vm)/(1<<20), fmt.Sprintf("/proc/%d/status VmRSS after scheduling %d (VmHWM %.0f MiB)", pid, got, float64(hwm)/(1<<20)))
			progress("  %s: redis-server VmRSS %.0f MiB (VmHWM %.0f MiB)", sys.name(), float64(vm)/(1<<20), float64(hwm)/(1<<20))
		} else {
			b.res.note("redis_vmrss_mib: cannot read /proc/%d/status: %v", pid, err)
		}
	} else {
		b.res.note("redis_vmrss_mib: n/a, REDIS_ADDR names a server this program did not start")
	}

	// The topic with 1k scheduled sits beside the big one, and the claim rounds of the two
	// alternate: on this machine the rate drifts by 10-20 % within minutes, which a before-and-
	// after order would count as the backlog's cost.
	small := b.topic("scale-small")
	if err := initialize(sys, b.addr, small); err != nil {
		return err
	}
	prod, err = sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	_, _, err = publishN(prod, small, b.sz.scaleSmallN, 16, 100, 10*time.Minute, b.futureItem)
	prod.close()
	if err != nil {
		return err
	}
	dueN := b.sz.scaleDueN
	rates, cpus, err := b.alternateClaimRates(sys, []string{big, small}, dueN)
	if err != nil {
		return err
	}
	allBig, allSmall, cpuBig, cpuSmall := rates[0], rates[1], cpus[0], cpus[1]
	rateBig, rateSmall := slices.Max(allBig), slices.Max(allSmall)
	progress("  %s: claim+ack with %d scheduled: %s msg/s, %s µs/msg of Redis CPU", sys.name(), got, fmtRates(allBig), fmtCPUs(cpuBig))
	progress("  %s: claim+ack with %d scheduled: %s msg/s, %s µs/msg of Redis CPU", sys.name(), b.sz.scaleSmallN, fmtRates(allSmall), fmtCPUs(cpuSmall))

	flushStart := time.Now()
	if err := b.dropBig(big); err != nil {
		return err
	}
	progress("  %s: removing %d scheduled took %s", sys.name(), got, time.Since(flushStart).Round(time.Millisecond))
	b.res.set("claim_1k", sys.name(), rateSmall, fmt.Sprintf("%d scheduled + %d due consumed, best of %s msg/s; Redis CPU %s µs/msg", b.sz.scaleSmallN, dueN, fmtRates(allSmall), fmtCPUs(cpuSmall)))
	b.res.set("claim_10m", sys.name(), rateBig, fmt.Sprintf("%d scheduled + %d due consumed, best of %s msg/s; Redis CPU %s µs/msg", got, dueN, fmtRates(allBig), fmtCPUs(cpuBig)))
	b.res.set("claim_10m_vs_1k", sys.name(), rateBig/rateSmall, "rounds alternated with claim_1k's; target >= 0.95")
	return nil
}
