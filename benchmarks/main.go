// Command benchmarks compares the redisdelay Watermill adapter with watermill-redisstream and
// asynq on one Redis. See README.md.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

var scenarioNames = []string{"publish", "batch", "consume", "wmbench", "lateness", "burst", "idle", "scale", "cluster"}

var runStart = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(runStart).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	os.Exit(run())
}

func run() int {
	var (
		quick      = flag.Bool("quick", false, "smoke mode: small counts and short windows")
		only       = flag.String("only", "", "comma-separated scenarios to run: "+strings.Join(scenarioNames, ","))
		systemsArg = flag.String("systems", "redisdelay,redisstream,asynq", "comma-separated systems to run")
		flush      = flag.Bool("flush", false, "FLUSHALL between scenarios also when REDIS_ADDR is set")
		claimBatch = flag.Int("claim-batch", 0, fmt.Sprintf("redisdelay SubscriberConfig.ClaimBatchSize (0 = library default, %d)", redisdelay.DefaultClaimBatchSize))
		lateSubs   = flag.Int("lateness-subs", 0, "subscribers (asynq: Concurrency) in the lateness scenario (0 = 1)")
		redisStats = flag.Bool("redis-stats", false, "print redis-server CPU use and the costliest commands of each measurement to stderr")
		burstSubs  = flag.Int("burst-subs", 0, "subscribers (asynq: Concurrency) in the due-burst scenario (0 = 1)")
		cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of this process to `file`")
		memProfile = flag.String("memprofile", "", "write an allocation profile of this process to `file` when it ends")
	)
	flag.Parse()

	sz := fullSizes
	if *quick {
		sz = quickSizes
	}
	if *burstSubs > 0 {
		sz.burstSubs = *burstSubs
	}
	if *lateSubs > 0 {
		sz.lateSubs = *lateSubs
	}
	scenarios := scenarioNames
	if *only != "" {
		scenarios = nil
		for _, s := range strings.Split(*only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarioNames, s) {
				fmt.Fprintf(os.Stderr, "unknown scenario %q; want some of %s\n", s, strings.Join(scenarioNames, ","))
				return 2
			}
			scenarios = append(scenarios, s)
		}
	}
	var systems []system
	var sysNames []string
	for _, name := range strings.Split(*systemsArg, ",") {
		sys, err := newSystem(strings.TrimSpace(name), *claimBatch)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		systems = append(systems, sys)
		sysNames = append(sysNames, sys.name())
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
		defer writeAllocs(*memProfile)
	}

	addr := os.Getenv("REDIS_ADDR")
	canFlush := *flush
	if addr == "" {
		srv, err := startRedis()
		if err != nil {
			fmt.Fprintln(os.Stderr, "start redis-server:", err)
			return 1
		}
		defer srv.stop()
		// Kill the server on Ctrl-C / SIGTERM too.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		go func() {
			<-sigs
			srv.stop()
			os.Exit(130)
		}()
		addr, canFlush = srv.addr, true
		progress("started redis-server on %s", addr)
	} else {
		progress("using REDIS_ADDR=%s (FLUSHALL between scenarios: %v)", addr, canFlush)
	}

	admin := newClient(addr, 2)
	defer admin.Close()
	if err := admin.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 1
	}
	version := "?"
	if text, err := admin.Info(context.Background(), "server").Result(); err == nil {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}

	b := &bench{
		addr:     addr,
		admin:    admin,
		canFlush: canFlush,
		runID:    strconv.FormatInt(time.Now().UnixNano()%1e9, 36),
		sz:       sz,
		res:      newResults(sysNames),
		payload:  bytes.Repeat([]byte("x"), 100),
		stats:    *redisStats,
	}
	claimNote := fmt.Sprintf("library default %d", redisdelay.DefaultClaimBatchSize)
	if *claimBatch > 0 {
		claimNote = strconv.Itoa(*claimBatch)
	}
	horizonNote := "library default " + redisdelay.DefaultCompactHorizon.String()
	if *compactHorizon != 0 {
		horizonNote = compactHorizon.String()
	}
	b.res.note("redis-server %s on loopback; redisdelay ClaimBatchSize: %s; CompactHorizon: %s; payload 100 B; GOMAXPROCS %d", version, claimNote, horizonNote, runtime.GOMAXPROCS(0))

	failed := false
	for _, sc := range scenarios {
		for _, sys := range b.rounds(sc, systems) { // -rounds times over the systems (rounds.go)
			if (sc == "lateness" || sc == "lateness_loaded" || sc == "burst") && !sys.supportsDelay() {
				continue
			}
			if (sc == "scale" && sys.name() == sysRedisStream) || ((sc == "cluster" || sc == "schedules") && sys.name() != sysRedisDelay) {
				continue
			}
			progress("%s: %s", sc, sys.name())
			var err error
			switch sc {
			case "publish":
				err = b.runPublish(sys, false)
			case "batch":
				err = b.runPublish(sys, true)
			case "consume":
				err = b.runConsume(sys)
			case "wmbench":
				err = b.runWMBench(sys)
			case "lateness":
				err = b.runLateness(sys)
			case "lateness_loaded":
				err = b.runLatenessLoaded(sys) // lateness_loaded.go
			case "burst":
				err = b.runBurst(sys)
			case "idle":
				err = b.runIdle(sys)
			case "scale":
				err = b.runScale(sys)
			case "cluster":
				err = b.runCluster(sys) // cluster.go; redisdelay only
			case "schedules":
				err = b.runSchedules(sys) // schedules.go; redisdelay only
			}
			if err != nil {
				failed = true
				progress("%s: %s: FAILED: %v", sc, sys.name(), err)
				b.res.note("%s / %s failed: %v", sc, sys.name(), err)
			}
		}
	}
	_ = b.reset()
	progress("done")

	fmt.Println()
	b.res.printTable(os.Stdout)
	fmt.Println()
	b.res.printBench(os.Stdout)
	if failed {
		return 1
	}
	return 0
}

// writeAllocs writes the allocation profile (every allocation since the start, sampled at
// runtime.MemProfileRate) to path; a failure is printed, not returned.
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "memprofile:", err)
	}
}
