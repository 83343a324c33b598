package dashboard

// This file owns the overview page: the Stats of every topic and group on the dashboard, one
// row each, written by hand for speed.

import (
	"context"
	"html"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/watermill-redisdelay/redisdelay"
)

// overview renders every topic and group with its Stats and lateness.
func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	stats, missing, err := s.stats(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	var rows strings.Builder
	rows.Grow(len(stats) * 900)
	for _, st := range stats {
		s.overviewRow(&rows, st)
	}
	s.render(w, http.StatusOK, "overview", page{Title: "Queues", Body: struct {
		Rows       template.HTML
		Missing    []string
		Lateness   bool
		Thresholds Thresholds
		Live       live
	}{template.HTML(rows.String()), missing, s.opts.Lateness != nil, s.opts.Thresholds, s.live(r)}})
}

// overviewRow writes one group's row of the overview to b. It is written here rather than in the
// template because html/template, through reflection, takes some 30 µs a row, and the overview
// of 1,000 topics must render well within 200 ms; so every value passes html.EscapeString here.
// A cell that needs attention has the class and data-level of its level (see Thresholds), and
// the row the worst of them.
func (s *server) overviewRow(b *strings.Builder, st redisdelay.GroupStats) {
	lv := s.opts.Thresholds.levels(st)
	text := func(v string) { b.WriteString(html.EscapeString(v)) }
	cell := func(class, stat string, l level, v string) {
		b.WriteString(`<td class="`)
		b.WriteString(class)
		if l != levelNone {
			b.WriteString(" " + string(l) + `" data-level="` + string(l))
		}
		b.WriteString(`" data-stat="`)
		b.WriteString(stat)
		b.WriteString(`">`)
		b.WriteString(v)
		b.WriteString("</td>\n")
	}
	num := func(stat string, l level, v string) { cell("num", stat, l, html.EscapeString(v)) }
	b.WriteString(`<tr data-topic="`)
	text(st.Topic)
	b.WriteString(`" data-group="`)
	text(st.Group)
	if lv.Row != levelNone {
		b.WriteString(`" class="row-` + string(lv.Row) + `" data-level="` + string(lv.Row))
	}
	b.WriteString("\">\n<td>")
	text(st.Topic)
	b.WriteString("</td>\n<td><a href=\"")
	text(s.groupURL(st.Topic, st.Group, nil))
	if st.Group == redisdelay.ParkedGroup {
		b.WriteString(`" class="parked">no group yet: parked</a></td>` + "\n")
	} else {
		b.WriteString(`">`)
		text(st.Group)
		b.WriteString("</a></td>\n")
	}
	num("scheduled", levelNone, strconv.FormatInt(st.Scheduled, 10))
	num("due", levelNone, strconv.FormatInt(st.Due, 10))
	num("in-flight", levelNone, strconv.FormatInt(st.InFlight, 10))
	num("dead", lv.Dead, strconv.FormatInt(st.DeadLetters, 10))
	age := "–"
	if st.OldestDueAge > 0 {
		age = shortDuration(st.OldestDueAge)
	}
	num("oldest-due", lv.Overdue, age)
	cell("time", "next-due", levelNone, string(when(st.NextDue)))
	switch {
	case st.Group == redisdelay.ParkedGroup:
		cell("", "paused", levelNone, "waits for a first group")
	case st.Paused:
		cell("", "paused", lv.Paused, `<span class="badge `+string(lv.Paused)+`">paused</span>`)
	default:
		cell("", "paused", levelNone, "not paused")
	}
	if s.opts.Lateness != nil {
		p50, p99 := "–", "–"
		if d50, d99, ok := s.opts.Lateness(st.Topic, st.Group); ok {
			p50, p99 = shortDuration(d50), shortDuration(d99)
		}
		num("lateness-p50", levelNone, p50)
		num("lateness-p99", levelNone, p99)
	}
	b.WriteString("</tr>\n")
}

// stats returns the Stats of every topic on the dashboard, and the topics of Options.Topics
// that do not exist (yet).
func (s *server) stats(ctx context.Context) ([]redisdelay.GroupStats, []string, error) {
	if s.topics == nil {
		st, err := s.in.Stats(ctx)
		return st, nil, err
	}
	// Stats fails as a whole for a topic it does not know, so ask only for those that exist.
	all, err := s.in.Topics(ctx)
	if err != nil {
		return nil, nil, err
	}
	var present, missing []string
	for _, t := range all {
		if s.topics[t.Topic] {
			present = append(present, t.Topic)
		}
	}
	for _, t := range s.opts.Topics {
		if !slices.Contains(present, t) && !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	if len(present) == 0 {
		return nil, missing, nil
	}
	st, err := s.in.Stats(ctx, present...)
	return st, missing, err
}
