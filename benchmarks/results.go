package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// figure describes one reported number.
type figure struct {
	id          string // machine name, used in BENCH lines
	title       string // table label
	unit        string
	lowerBetter bool
	oursOnly    bool // no peer comparison makes sense (ratio is n/a)
}

var figures = []figure{
	{id: "publish", title: "publish, 1 msg/Publish, 16 goroutines", unit: "msg/s"},
	{id: "publish_batched", title: "publish, 100 msg/Publish, 16 goroutines", unit: "msg/s"},
	{id: "publish_64", title: "publish, 1 msg/Publish, 64 goroutines", unit: "msg/s"},
	{id: "consume_1", title: "consume+ack, 1 subscriber", unit: "msg/s"},
	{id: "consume_4", title: "consume+ack, 4 subscribers, 1 group", unit: "msg/s"},
	{id: "consume_scaling", title: "consume scaling 4 subs / 1 sub", unit: "x"},
	{id: "cpu_publish_1", title: "Redis CPU per msg: publish, 1 msg/Publish", unit: "µs/msg", lowerBetter: true},
	{id: "cpu_publish_100", title: "Redis CPU per msg: publish, 100 msg/Publish", unit: "µs/msg", lowerBetter: true},
	{id: "cpu_claim_ack", title: "Redis CPU per msg: claim+ack (consume_1)", unit: "µs/msg", lowerBetter: true},
	{id: "cpu_nack", title: "Redis CPU per msg: nack path", unit: "µs/msg", lowerBetter: true},
	{id: "wm_publish_16", title: "watermill-benchmark publish, 16 B, 64 goroutines", unit: "msg/s"},
	{id: "wm_subscribe_16", title: "watermill-benchmark subscribe (router), 16 B", unit: "msg/s"},
	{id: "wm_publish_64", title: "watermill-benchmark publish, 64 B, 64 goroutines", unit: "msg/s"},
	{id: "wm_subscribe_64", title: "watermill-benchmark subscribe (router), 64 B", unit: "msg/s"},
	{id: "wm_publish_256", title: "watermill-benchmark publish, 256 B, 64 goroutines", unit: "msg/s"},
	{id: "wm_subscribe_256", title: "watermill-benchmark subscribe (router), 256 B", unit: "msg/s"},
	{id: "lateness_p50", title: "delayed lateness p50", unit: "ms", lowerBetter: true},
	{id: "lateness_p99", title: "delayed lateness p99", unit: "ms", lowerBetter: true},
	{id: "lateness_p999", title: "delayed lateness p99.9", unit: "ms", lowerBetter: true},
	{id: "lateness_max", title: "delayed lateness max", unit: "ms", lowerBetter: true},
	{id: "lateness_early", title: "delayed early deliveries", unit: "count", lowerBetter: true},
	{id: "due_burst_1m_ms", title: "due burst, 1M due in one ms, 1 sub: due -> last delivery", unit: "ms", lowerBetter: true},
	{id: "due_burst_rate", title: "due burst delivery rate (counts differ, see notes)", unit: "msg/s"},
	{id: "due_burst_early", title: "due burst early deliveries", unit: "count", lowerBetter: true},
	{id: "idle_total", title: "idle Redis commands, total", unit: "cmd/s", lowerBetter: true},
	{id: "idle_per_sub", title: "idle Redis commands per subscriber", unit: "cmd/s", lowerBetter: true},
	{id: "idle_peak_ratio", title: "idle Redis commands, busiest second / average", unit: "x", lowerBetter: true},
	{id: "mem_per_msg", title: "memory per scheduled message", unit: "B", lowerBetter: true},
	{id: "mem_beyond_payload", title: "memory per scheduled msg beyond 100 B payload", unit: "B", lowerBetter: true},
	{id: "publish_10m_seconds", title: "schedule 10M msgs (-scale-n) a year ahead", unit: "s", lowerBetter: true, oursOnly: true},
	{id: "redis_used_memory_rss_mib", title: "Redis used_memory_rss with 10M scheduled", unit: "MiB", lowerBetter: true, oursOnly: true},
	{id: "redis_vmrss_mib", title: "redis-server VmRSS with 10M scheduled", unit: "MiB", lowerBetter: true, oursOnly: true},
	{id: "claim_1k", title: "claim+ack, 1 sub, 1k scheduled present", unit: "msg/s", oursOnly: true},
	{id: "claim_10m", title: "claim+ack, 1 sub, 10M scheduled present", unit: "msg/s", oursOnly: true},
	{id: "claim_10m_vs_1k", title: "claim throughput 10M / 1k", unit: "x", oursOnly: true},
}

func figureByID(id string) figure {
	for _, f := range figures {
		if f.id == id {
			return f
		}
	}
	panic("unknown figure " + id)
}

// result is one system's value for one figure. A missing result prints as n/a.
type result struct {
	value float64
	note  string
}

type results struct {
	systems  []string
	values   map[string]map[string]result // figure -> system -> median of the rounds
	notes    []string
	round    int                                // current round, from 0 (see rounds.go)
	perRound map[string]map[string][]roundValue // figure -> system -> each round's value
}

func newResults(systems []string) *results {
	return &results{systems: systems, values: map[string]map[string]result{}}
}

// set records the current round's value; the figure's value is the median of its rounds.
func (r *results) set(fig, sys string, v float64, note string) {
	figureByID(fig)
	r.record(fig, sys, v, note)
}

func (r *results) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// ratio is ours / best peer (best peer / ours when lower is better), so > 1 means we are better.
func (r *results) ratio(f figure) (float64, bool) {
	if f.oursOnly {
		return 0, false
	}
	vals := r.values[f.id]
	ours, ok := vals[sysRedisDelay]
	if !ok {
		return 0, false
	}
	best, found := 0.0, false
	for sys, v := range vals {
		if sys == sysRedisDelay {
			continue
		}
		if !found || (f.lowerBetter && v.value < best) || (!f.lowerBetter && v.value > best) {
			best, found = v.value, true
		}
	}
	if !found {
		return 0, false
	}
	return betterRatio(ours.value, best, f.lowerBetter), true
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func (r *results) hasFigure(f figure) bool { return len(r.values[f.id]) > 0 }

// printTable writes the human-readable table.
func (r *results) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"figure", "unit", "better"}
	header = append(header, r.systems...)
	header = append(header, "ratio_to_best_peer")
	withStream := slices.Contains(r.systems, sysRedisStream) && slices.Contains(r.systems, sysRedisDelay)
	if withStream {
		header = append(header, "ratio_to_redisstream")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, f := range figures {
		if !r.hasFigure(f) {
			continue
		}
		better := "higher"
		if f.lowerBetter {
			better = "lower"
		}
		row := []string{f.title, f.unit, better}
		for _, sys := range r.systems {
			if v, ok := r.values[f.id][sys]; ok {
				row = append(row, formatValue(v.value))
			} else {
				row = append(row, "n/a")
			}
		}
		if q, ok := r.ratio(f); ok {
			row = append(row, formatValue(q))
		} else {
			row = append(row, "n/a")
		}
		if withStream {
			if q, ok := r.ratioToStream(f); ok && !f.oursOnly {
				row = append(row, formatValue(q))
			} else {
				row = append(row, "n/a")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "ratio_to_best_peer: redisdelay / best peer, or best peer / redisdelay for \"lower\" figures; > 1 means redisdelay is better.")
	if withStream {
		fmt.Fprintln(w, "ratio_to_redisstream: the same against watermill-redisstream alone.")
	}
	if r.multiRound() {
		fmt.Fprintln(w, "Values are the median of the rounds (listed after the notes); ratios are computed from the medians.")
	}
	var notes []string
	for _, f := range figures {
		for _, sys := range r.systems {
			if v, ok := r.values[f.id][sys]; ok && v.note != "" {
				notes = append(notes, fmt.Sprintf("%s / %s: %s", f.id, sys, v.note))
			}
		}
	}
	for _, n := range r.notes { // scenarios may add the same note in every round
		if !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "notes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
	r.printRounds(w)
}

// printBench writes one machine-readable line per figure and system.
func (r *results) printBench(w io.Writer) {
	for _, f := range figures {
		if !r.hasFigure(f) {
			continue
		}
		for _, sys := range r.systems {
			v, ok := r.values[f.id][sys]
			value := "n/a"
			if ok {
				value = formatValue(v.value)
			}
			line := fmt.Sprintf("BENCH figure=%s system=%s value=%s unit=%s", f.id, sys, value, f.unit)
			if sys == sysRedisDelay {
				q, ok := r.ratio(f)
				rs := "n/a"
				if ok {
					rs = formatValue(q)
				}
				line += " ratio_to_best_peer=" + rs
				if q, ok := r.ratioToStream(f); ok && !f.oursOnly {
					line += " ratio=" + formatValue(q)
				}
			}
			if ok {
				line += " rounds=" + r.roundValues(f.id, sys)
			}
			fmt.Fprintln(w, line)
		}
	}
}
