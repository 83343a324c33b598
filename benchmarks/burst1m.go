package main

// Helpers of the due-burst scenario (runBurst in scenarios.go): 1M messages due in one
// millisecond for redisdelay, a smaller, labelled count for asynq, and its figures.

import (
	"flag"
	"fmt"
	"slices"
	"time"
)

var (
	burstNFlag      = flag.Int("burst-n", 1_000_000, "burst: messages due in the same millisecond (with -quick: 20,000 unless given)")
	asynqBurstFlag  = flag.Int("asynq-burst-n", 50_000, "burst: asynq's task count (its enqueue and dequeue rates make 1M take minutes); 0 = skip asynq")
	burstCapFlag    = flag.Duration("burst-cap", 2*time.Minute, "burst: how long after the due time to wait for the last delivery")
	asynqBurstCapFl = flag.Duration("asynq-burst-cap", time.Minute, "burst: the same for asynq; if its run is not complete by then, its figures are n/a")
)

// burstCount is how many messages sys gets in the burst scenario.
func (b *bench) burstCount(sys system) int {
	n := b.sz.burstN
	if flagGiven("burst-n") {
		n = max(*burstNFlag, 1)
	}
	if sys.name() == sysAsynq {
		n = min(n, max(*asynqBurstFlag, 0))
	}
	return n
}

// burstCap bounds the wait for the last delivery after the due time.
func burstCap(sys system) time.Duration {
	if sys.name() == sysAsynq {
		return *asynqBurstCapFl
	}
	return *burstCapFlag
}

// setBurst records the burst figures: due_burst_1m_ms only for the full count, the delivery rate
// and the early deliveries for every system that finished within the cap.
func (b *bench) setBurst(sys system, total, got int, complete bool, took time.Duration, early int, note string) {
	full := b.sz.burstN
	if flagGiven("burst-n") {
		full = max(*burstNFlag, 1)
	}
	ms := float64(took) / 1e6
	if !complete {
		b.res.note("due_burst / %s, round %d: n/a (%d messages): %s", sys.name(), b.res.round+1, total, note)
		return
	}
	rateNote := fmt.Sprintf("%d messages, %.0f ms from due to last delivery; %s", total, ms, note)
	if total == full {
		b.res.set("due_burst_1m_ms", sys.name(), ms, joinNote(fmt.Sprintf("%d messages", total), note))
	} else {
		b.noteOnce(fmt.Sprintf("due_burst_1m_ms / %s: n/a: it runs the burst with %d messages instead of %d (-asynq-burst-n; its enqueue and dequeue rates would make %d take minutes), within %s of the due time; its time is in due_burst_rate's note", sys.name(), total, full, full, burstCap(sys)))
	}
	b.res.set("due_burst_rate", sys.name(), float64(got)/took.Seconds(), rateNote)
	b.res.set("due_burst_early", sys.name(), float64(early), "")
}

// noteOnce adds a note unless it is there already (scenarios run once per round).
func (b *bench) noteOnce(note string) {
	if !slices.Contains(b.res.notes, note) {
		b.res.note("%s", note)
	}
}
