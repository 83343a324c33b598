package dashboard

// This file owns the overview page: the Stats of every topic and group on the dashboard, one
// row each, written by hand for speed.

import (
	"html"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// overview renders one page of topics (see topicsPage) with their groups' Stats and lateness.
func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	p, err := s.topicsPage(r.Context(), r)
	if err != nil {
		s.fail(w, err)
		return
	}
	running, err := s.schedulersRunning(r.Context(), p.Stats)
	if err != nil {
		s.fail(w, err)
		return
	}
	var rows strings.Builder
	rows.Grow(len(p.Stats) * 900)
	for _, st := range p.Stats {
		s.overviewRow(&rows, st, running)
	}
	s.render(w, http.StatusOK, "overview", page{Title: "Queues", Body: struct {
		topicsPage
		Rows       template.HTML
		Lateness   bool
		Thresholds Thresholds
		Live       live
		PageSize   int
	}{p, template.HTML(rows.String()), s.opts.Lateness != nil, s.opts.Thresholds, s.live(r), overviewPageSize}})
}

// overviewRow writes one group's row of the overview to b. It is written here rather than in the
// template because html/template, through reflection, takes some 30 µs a row, and the overview
// of 1,000 topics must render well within 200 ms; so every value passes html.EscapeString here.
// A cell that needs attention has the class and data-level of its level (see Thresholds), and
// the row the worst of them. schedulers is whether a Scheduler runs, for the row of the
// schedules' tick topic (see writeTicksCell).
func (s *server) overviewRow(b *strings.Builder, st redisdelay.GroupStats, schedulers bool) {
	lv := s.opts.Thresholds.levels(st)
	internal := st.Topic == schedule.TickTopic
	if internal && ticksOverdue(st) {
		lv.Row = levelAlarm
	}
	b.WriteString(`<tr data-topic="`)
	b.WriteString(html.EscapeString(st.Topic))
	b.WriteString(`" data-group="`)
	b.WriteString(html.EscapeString(st.Group))
	if lv.Row != levelNone {
		b.WriteString(`" class="row-` + string(lv.Row) + `" data-level="` + string(lv.Row))
	}
	b.WriteString("\">\n<td>")
	b.WriteString(html.EscapeString(st.Topic))
	if internal {
		b.WriteString(` <span class="badge" data-internal="ticks" title="the schedules' ticks">internal</span>`)
	}
	b.WriteString("</td>\n<td><a href=\"")
	b.WriteString(html.EscapeString(s.groupURL(st.Topic, st.Group, nil)))
	switch {
	case internal && st.Group == redisdelay.ParkedGroup:
		b.WriteString(`" class="internal">no Scheduler yet</a></td>` + "\n")
	case st.Group == redisdelay.ParkedGroup:
		b.WriteString(`" class="parked">no group yet: parked</a></td>` + "\n")
	default:
		b.WriteString(`">`)
		b.WriteString(html.EscapeString(st.Group))
		b.WriteString("</a></td>\n")
	}
	writeCountCells(b, st, lv)
	if internal {
		writeTicksCell(b, st, lv, schedulers, s.opts.Prefix)
	} else {
		writePausedCell(b, st, lv)
	}
	s.writeLatenessCells(b, st)
	b.WriteString("</tr>\n")
}

// writeCountCells writes the cells of a row of the overview that count messages, the age of
// the oldest due one and the next due time.
func writeCountCells(b *strings.Builder, st redisdelay.GroupStats, lv groupLevels) {
	writeNumCell(b, "scheduled", levelNone, strconv.FormatInt(st.Scheduled, 10))
	writeNumCell(b, "due", levelNone, strconv.FormatInt(st.Due, 10))
	writeNumCell(b, "in-flight", levelNone, strconv.FormatInt(st.InFlight, 10))
	writeNumCell(b, "dead", lv.Dead, strconv.FormatInt(st.DeadLetters, 10))
	age := "–"
	if st.OldestDueAge > 0 {
		age = shortDuration(st.OldestDueAge)
	}
	writeNumCell(b, "oldest-due", lv.Overdue, age)
	writeCell(b, "time", "next-due", levelNone, string(when(st.NextDue)))
}

// writePausedCell writes the cell of a row of the overview that says whether the group is
// paused.
func writePausedCell(b *strings.Builder, st redisdelay.GroupStats, lv groupLevels) {
	switch {
	case st.Group == redisdelay.ParkedGroup:
		writeCell(b, "", "paused", levelNone, "waits for a first group")
	case st.Paused:
		writeCell(b, "", "paused", lv.Paused, `<span class="badge `+string(lv.Paused)+`">paused</span>`)
	default:
		writeCell(b, "", "paused", levelNone, "not paused")
	}
}

// writeLatenessCells writes the lateness cells of a row of the overview, when Options.Lateness
// gives them.
func (s *server) writeLatenessCells(b *strings.Builder, st redisdelay.GroupStats) {
	if s.opts.Lateness == nil {
		return
	}
	p50, p99 := "–", "–"
	if d50, d99, ok := s.opts.Lateness.Lateness(st.Topic, st.Group); ok {
		p50, p99 = shortDuration(d50), shortDuration(d99)
	}
	writeNumCell(b, "lateness-p50", levelNone, p50)
	writeNumCell(b, "lateness-p99", levelNone, p99)
}

// writeNumCell writes a cell of the overview that holds a figure, v, which it escapes.
func writeNumCell(b *strings.Builder, stat string, l level, v string) {
	writeCell(b, "num", stat, l, html.EscapeString(v))
}

// writeCell writes a cell of the overview: its class, its level l (see Thresholds), stat, the
// figure it shows, and v, its HTML content, which the caller has escaped.
func writeCell(b *strings.Builder, class, stat string, l level, v string) {
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
