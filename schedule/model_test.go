package schedule_test

import (
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
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
//	REDISDELAY_SCHED_MODEL_OPS      operations in all (default schedModelDefaultOps; a third in the quick run)
//	REDISDELAY_SCHED_MODEL_SECONDS  no sequence starts after this many seconds (default schedModelDefaultSeconds; a third in the quick run)
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
	defaultOps, defaultSeconds := schedModelDefaultOps, schedModelDefaultSeconds
	if !redistest.Long(t) { // the quick run: a third of it
		defaultOps, defaultSeconds = schedModelDefaultOps/3, schedModelDefaultSeconds/3
	}
	total := envInt("REDISDELAY_SCHED_MODEL_OPS", defaultOps)
	perSeq := envInt("REDISDELAY_SCHED_MODEL_SEQ_OPS", 40)
	seed0 := int64(envInt("REDISDELAY_SCHED_MODEL_SEED", int(time.Now().UnixNano()%1e9)))
	budget := time.Duration(envInt("REDISDELAY_SCHED_MODEL_SECONDS", defaultSeconds)) * time.Second
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
