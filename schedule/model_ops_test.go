package schedule_test

// The operations of the schedule model test: the definitions a schedule is put with, the
// operations, their text form and their random generation.

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay/schedule"
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
