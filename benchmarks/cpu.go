package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Redis CPU per message: the usec that INFO commandstats adds up for the top-level commands a
// system sends, divided by the messages of the measurement. Only top-level commands count:
// Redis 7 also lists the commands a Lua script runs (zadd, hset, ...) under their own names, and
// their time is already part of the script's, so for the script-based systems only the script
// commands count.

// scriptCmdNames are the commandstats names of script calls.
var scriptCmdNames = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// countedCommand reports whether commandstats' command cmd (lower case, "xgroup|create" for a
// subcommand) is one that system sys sends at the top level on its message path: redisdelay and
// asynq call Lua scripts; redisstream sends the stream commands (xadd, xreadgroup, xack,
// xautoclaim, xclaim, xpending, xgroup, xinfo).
func countedCommand(sys, cmd string) bool {
	switch sys {
	case sysRedisStream:
		return strings.HasPrefix(cmd, "x")
	default:
		for _, s := range scriptCmdNames {
			if cmd == s {
				return true
			}
		}
		return false
	}
}

// cmdCost is the calls and server time of the counted commands between two snapshots.
type cmdCost struct {
	calls, usec float64
}

// countedCost sums the counted commands of sys between before and after.
func countedCost(sys string, before, after redisStats) cmdCost {
	var c cmdCost
	for name, v := range after.commands {
		if !countedCommand(sys, name) {
			continue
		}
		b := before.commands[name]
		c.calls += v[0] - b[0]
		c.usec += v[1] - b[1]
	}
	return c
}

// cpuMeter measures the counted commands of one system from now on.
type cpuMeter struct {
	b      *bench
	sys    string
	before redisStats
	err    error
}

func (b *bench) cpuMeter(sys string) *cpuMeter {
	m := &cpuMeter{b: b, sys: sys}
	m.before, m.err = snapshotStats(context.Background(), b.admin)
	return m
}

// done returns the counted cost since the meter started.
func (m *cpuMeter) done() (cmdCost, error) {
	if m.err != nil {
		return cmdCost{}, m.err
	}
	after, err := snapshotStats(context.Background(), m.b.admin)
	if err != nil {
		return cmdCost{}, err
	}
	return countedCost(m.sys, m.before, after), nil
}

// cpuWhat describes what the CPU figures of sys count, for notes.
func cpuWhat(sys string) string {
	switch sys {
	case sysRedisStream:
		return "stream commands (x*)"
	case sysAsynq:
		return "asynq's Lua scripts (its per-task path is scripts)"
	}
	return "script calls (evalsha & co.)"
}

// ---- publish figures ----

// publishFigure measures one publish figure: total messages from workers goroutines, batch per
// Publish (asynq: always one Enqueue per task), capped at b.sz.publishCap. cpuFig, when not
// empty, gets the Redis CPU per message of the same measurement.
func (b *bench) publishFigure(sys system, fig, cpuFig, name string, total, workers, batch int) error {
	if err := b.reset(); err != nil {
		return err
	}
	prod, err := sys.newProducer(b.addr)
	if err != nil {
		return err
	}
	defer prod.close()
	if sys.name() == sysAsynq {
		batch = 1 // asynq has no batch call: the batched figure is its per-task Enqueue
	}
	// Warm up on another topic, so that loading the scripts (EVAL on NOSCRIPT) is not counted.
	if _, _, err := publishN(prod, b.topic(name+"-warm-up"), 1, 1, 1, time.Minute, b.plainItem); err != nil {
		return err
	}
	w := b.watch()
	meter := b.cpuMeter(sys.name())
	n, took, err := publishN(prod, b.topic(name), total, workers, batch, b.sz.publishCap, b.plainItem)
	if err != nil {
		return err
	}
	cost, cerr := meter.done()
	w(sys.name() + " " + fig)
	note := ""
	if n < total {
		note = fmt.Sprintf("time-capped: %d of %d messages in %s", n, total, took.Round(time.Millisecond))
	}
	if batch == 1 && fig == "publish_batched" {
		note = joinNote(note, "no batch API: one Enqueue per task")
	}
	if workers > poolSize {
		note = joinNote(note, fmt.Sprintf("go-redis pool size %d", poolSize))
	}
	if cerr == nil && sys.name() == sysRedisDelay && cost.calls > 0 {
		note = joinNote(note, fmt.Sprintf("%.2f msgs per script call (%.3f calls/msg)", float64(n)/cost.calls, cost.calls/float64(n)))
	}
	rate := float64(n) / took.Seconds()
	b.res.set(fig, sys.name(), rate, note)
	if cerr != nil {
		b.res.note("%s / %s: no CPU figure: %v", fig, sys.name(), cerr)
	} else if cpuFig != "" && n > 0 {
		cpuNote := fmt.Sprintf("%s: %.0f calls, %.1f µs/call, %.2f msgs/call", cpuWhat(sys.name()), cost.calls, cost.usec/max(cost.calls, 1), float64(n)/max(cost.calls, 1))
		b.res.set(cpuFig, sys.name(), cost.usec/float64(n), cpuNote)
		progress("  %s: %s %.0f msg/s; Redis %.2f µs/msg, %.2f msgs per call", sys.name(), fig, rate, cost.usec/float64(n), float64(n)/max(cost.calls, 1))
		return nil
	}
	progress("  %s: %s %.0f msg/s", sys.name(), fig, rate)
	return nil
}
