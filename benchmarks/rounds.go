package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"iter"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Rounds: every scenario runs -rounds times; each round runs it for every system in turn, so the
// systems of one round share the machine's conditions. A figure's reported value is the median
// of its rounds; the per-round values are listed too.

var roundsFlag = flag.Int("rounds", 3, "measure every scenario this many times and report the median (scenarios in singleRoundScenarios run once)")

// singleRoundScenarios run once whatever -rounds says: they are too expensive to repeat. Add a
// scenario's -only name here to make it single-round (duplicates are harmless).
var singleRoundScenarios = []string{"scale"}

// roundsOf is the number of rounds scenario sc runs.
func roundsOf(sc string) int {
	if slices.Contains(singleRoundScenarios, sc) {
		return 1
	}
	return max(*roundsFlag, 1)
}

// rounds yields (round, system) for every round of scenario sc and every system that takes part
// in it, telling the results which round is under way.
func (b *bench) rounds(sc string, systems []system) iter.Seq2[int, system] {
	return func(yield func(int, system) bool) {
		n := roundsOf(sc)
		for round := range n {
			b.res.beginRound(round)
			if n > 1 {
				progress("%s: round %d of %d", sc, round+1, n)
			}
			for _, sys := range systems {
				if sc == "wmbench" && sys.name() == sysAsynq {
					continue // not a Watermill Pub/Sub
				}
				if !yield(round, sys) {
					return
				}
			}
		}
	}
}

// roundValue is one round's value of a figure for a system.
type roundValue struct {
	round int
	value float64
	note  string
}

func (r *results) beginRound(round int) { r.round = round }

// record stores v as the current round's value of fig for sys and makes the median of the
// rounds so far the figure's value.
func (r *results) record(fig, sys string, v float64, note string) {
	if r.perRound == nil {
		r.perRound = map[string]map[string][]roundValue{}
	}
	if r.perRound[fig] == nil {
		r.perRound[fig] = map[string][]roundValue{}
	}
	rv := r.perRound[fig][sys]
	rv = slices.DeleteFunc(rv, func(x roundValue) bool { return x.round == r.round })
	rv = append(rv, roundValue{round: r.round, value: v, note: note})
	slices.SortFunc(rv, func(a, b roundValue) int { return a.round - b.round })
	r.perRound[fig][sys] = rv

	vals := make([]float64, len(rv))
	for i, x := range rv {
		vals[i] = x.value
	}
	if r.values[fig] == nil {
		r.values[fig] = map[string]result{}
	}
	r.values[fig][sys] = result{value: median(vals), note: combineNotes(rv)}
}

// median of vals (the mean of the middle two for an even count); 0 for none.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// combineNotes returns the note of the rounds: the common one when every round had the same,
// otherwise the note of the median round (the lower middle one for an even count), followed by
// the notes of other rounds that warn (time caps, invalid or incomplete runs).
func combineNotes(rv []roundValue) string {
	if len(rv) == 1 {
		return rv[0].note
	}
	same := true
	for _, x := range rv[1:] {
		same = same && x.note == rv[0].note
	}
	if same {
		return rv[0].note
	}
	byValue := slices.Clone(rv)
	slices.SortStableFunc(byValue, func(a, b roundValue) int { return cmp.Compare(a.value, b.value) })
	mid := byValue[(len(byValue)-1)/2]
	label := "median"
	if len(rv)%2 == 0 {
		label = "lower middle"
	}
	midNote := mid.note
	if midNote == "" {
		midNote = "(none)"
	}
	parts := []string{fmt.Sprintf("r%d (%s): %s", mid.round+1, label, midNote)}
	for _, x := range rv {
		if x.round != mid.round && warns(x.note) {
			parts = append(parts, fmt.Sprintf("r%d: %s", x.round+1, x.note))
		}
	}
	return strings.Join(parts, " | ")
}

// warns reports whether a note says that its measurement was cut short or is not valid.
func warns(note string) bool {
	for _, w := range []string{"time-capped", "INVALID", "duplicate", "failed"} {
		if strings.Contains(note, w) {
			return true
		}
	}
	return onlyNofM.MatchString(note)
}

var onlyNofM = regexp.MustCompile(`only \d+ of \d+`)

// roundValues formats the per-round values of fig for sys, comma-separated, in round order.
func (r *results) roundValues(fig, sys string) string {
	rv := r.perRound[fig][sys]
	parts := make([]string, len(rv))
	for i, x := range rv {
		parts[i] = formatValue(x.value)
	}
	return strings.Join(parts, ",")
}

// multiRound reports whether any figure has more than one round.
func (r *results) multiRound() bool {
	for _, bySys := range r.perRound {
		for _, rv := range bySys {
			if len(rv) > 1 {
				return true
			}
		}
	}
	return false
}

// ratioToStream is redisdelay's value divided by redisstream's (inverse for lower-is-better
// figures), so above 1 means redisdelay is better; false when either lacks the figure.
func (r *results) ratioToStream(f figure) (float64, bool) {
	ours, ok1 := r.values[f.id][sysRedisDelay]
	peer, ok2 := r.values[f.id][sysRedisStream]
	if !ok1 || !ok2 {
		return 0, false
	}
	return betterRatio(ours.value, peer.value, f.lowerBetter), true
}

// printRounds writes the compact per-round listing.
func (r *results) printRounds(w io.Writer) {
	if !r.multiRound() {
		return
	}
	fmt.Fprintln(w, "per-round values (the table shows their median):")
	for _, f := range figures {
		if !r.hasFigure(f) {
			continue
		}
		var parts []string
		for _, sys := range r.systems {
			if _, ok := r.perRound[f.id][sys]; ok {
				parts = append(parts, sys+" "+strings.ReplaceAll(r.roundValues(f.id, sys), ",", " "))
			}
		}
		fmt.Fprintf(w, "  - %s: %s\n", f.id, strings.Join(parts, " | "))
	}
}

// betterRatio is ours / peer, or peer / ours for lower-is-better figures, so above 1 means ours
// is better; a zero denominator gives +Inf (1 when both are zero).
func betterRatio(ours, peer float64, lowerBetter bool) float64 {
	num, den := ours, peer
	if lowerBetter {
		num, den = peer, ours
	}
	if den == 0 {
		if num == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return num / den
}
