package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/watermill-redisdelay/redisdelay"
)

// pageSize is how many messages a group page lists.
const pageSize = 50

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

// live is the auto-refresh of a page (Options.RefreshInterval): while Polling, htmx fetches URL
// every Every and swaps the page's #live region for the new one; PauseURL is the same page
// without polling (?refresh=off), ResumeURL the page with it again ("" when auto-refresh is
// off altogether).
type live struct {
	Updated                  time.Time
	Polling                  bool
	Every                    time.Duration
	URL, PauseURL, ResumeURL string
}

// Trigger is the hx-trigger value of the polling: htmx reads an interval in ms or s only.
func (l live) Trigger() string {
	return "every " + strconv.FormatInt(l.Every.Milliseconds(), 10) + "ms"
}

// live returns the auto-refresh of the page r asked for.
func (s *server) live(r *http.Request) live {
	l := live{Updated: time.Now(), Every: s.opts.RefreshInterval}
	if l.Every < 0 {
		return l
	}
	q := r.URL.Query()
	paused := q.Get("refresh") == "off"
	q.Del("done") // a poll or a resumed page does not repeat an action's notice
	q.Del("refresh")
	pageURL := func(q url.Values) string {
		if len(q) == 0 {
			return r.URL.EscapedPath()
		}
		return r.URL.EscapedPath() + "?" + q.Encode()
	}
	l.URL, l.ResumeURL = pageURL(q), pageURL(q)
	q.Set("refresh", "off")
	l.PauseURL = pageURL(q)
	l.Polling = !paused
	return l
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

// messageView is what the message page shows.
type messageView struct {
	Info                                            redisdelay.MessageInfo
	Topic                                           string
	Group                                           string
	StateLabel                                      string
	Means                                           string // what the state means
	Dead                                            bool
	DeadLetterTopic                                 string
	InFlight                                        bool
	Payload                                         string
	PayloadKind                                     string // "JSON", "text" or "binary (hex dump)"
	Metadata                                        [][2]string
	Actions                                         bool
	ReturnState                                     string // the tab the forms return to
	CancelURL, RescheduleURL, RunNowURL, RequeueURL string
}

// message renders one message, named by ?ref= (with state=dead-lettered for a dead letter), ?key= or
// the search box's ?q=, an exact ref or key.
func (s *server) message(w http.ResponseWriter, r *http.Request) {
	topic, group, ok := s.target(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var (
		m    redisdelay.MessageInfo
		dead bool
		err  error
	)
	switch {
	case q.Get("ref") != "":
		m, dead, err = s.byRef(r.Context(), topic, group, q.Get("ref"), q.Get("state") == string(redisdelay.StateDeadLettered))
	case q.Get("key") != "":
		m, err = s.in.MessageByKey(r.Context(), topic, group, q.Get("key"))
	case strings.TrimSpace(q.Get("q")) != "":
		m, dead, err = s.search(r.Context(), topic, group, strings.TrimSpace(q.Get("q")))
	default:
		s.problem(w, http.StatusBadRequest, "name the message with ref, key or q")
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}

	v := messageView{Info: m, Topic: topic, Group: group, Dead: dead, Actions: s.mayAct(r) && group != redisdelay.ParkedGroup}
	v.Payload, v.PayloadKind = formatPayload(m.Payload)
	tab := states[0]
	switch {
	case dead:
		v.StateLabel, tab = "dead letter", states[3]
		v.DeadLetterTopic = redisdelay.DefaultDeadLetterTopic(topic, group)
	case m.State == redisdelay.StateInFlight:
		v.StateLabel, tab, v.InFlight = "in flight", states[2], true
	case !m.DueAt.After(time.Now()):
		v.StateLabel, tab = "due", states[1]
	default:
		v.StateLabel = "scheduled"
	}
	v.ReturnState, v.Means = string(tab.State), tab.Means
	groupLabel := group
	if group == redisdelay.ParkedGroup {
		v.Means, groupLabel = parkedMeans, "parked (no consumer group)"
	}
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.Metadata = append(v.Metadata, [2]string{k, m.Metadata[k]})
	}
	// The forms carry the ref in their URL, percent-encoded: a ref can hold any byte (the
	// member of a message stored inline holds the marshaled message), which a form field in a
	// UTF-8 page would not carry intact.
	ref := url.Values{"ref": {m.Ref}}
	v.CancelURL = s.messageURL(topic, group, "/cancel", ref)
	v.RescheduleURL = s.messageURL(topic, group, "/reschedule", ref)
	v.RunNowURL = s.messageURL(topic, group, "/run-now", ref)
	v.RequeueURL = s.messageURL(topic, group, "/requeue", ref)
	name := cmp.Or(m.Key, m.UUID, m.ID)
	s.render(w, http.StatusOK, "message", page{
		Title: "Message " + name,
		Crumbs: []crumb{{Label: topic}, {Label: groupLabel, URL: s.groupURL(topic, group, nil)},
			{Label: tab.Label, URL: s.groupURL(topic, group, url.Values{"state": {v.ReturnState}})}, {Label: name}},
		Notice: notice(q.Get("done")),
		Body:   v,
	})
}

// byRef finds the message ref names: a dead letter through Inspector.DeadLetter, anything else
// through Message, each reading that one message. It reports whether the message is a dead
// letter.
func (s *server) byRef(ctx context.Context, topic, group, ref string, dead bool) (redisdelay.MessageInfo, bool, error) {
	if !dead {
		m, err := s.in.Message(ctx, topic, group, ref)
		return m, false, err
	}
	m, err := s.in.DeadLetter(ctx, topic, group, ref)
	return m, true, err
}

// search finds the message whose ref or key is exactly q: as a ref (of a message the group
// holds, then of a dead letter) when q has the shape of one, then as a key.
func (s *server) search(ctx context.Context, topic, group, q string) (redisdelay.MessageInfo, bool, error) {
	if isRef(q) {
		m, err := s.in.Message(ctx, topic, group, q)
		if !errors.Is(err, redisdelay.ErrNotFound) {
			return m, false, err
		}
		m, dead, err := s.byRef(ctx, topic, group, q, true)
		if !errors.Is(err, redisdelay.ErrNotFound) || redisdelay.ValidateKey(q) != nil {
			return m, dead, err
		}
	}
	m, err := s.in.MessageByKey(ctx, topic, group, q)
	return m, false, err
}

// isRef reports whether q has the shape of MessageInfo.Ref: a partition number, '/', a member.
func isRef(q string) bool {
	p, member, ok := strings.Cut(q, "/")
	_, err := strconv.Atoi(p)
	return ok && err == nil && member != ""
}

// formatPayload returns the payload as the message page shows it: indented when it is JSON,
// as it is when it is text, as a hex dump otherwise; and which of these it is.
func formatPayload(p []byte) (string, string) {
	if json.Valid(p) {
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			return buf.String(), "JSON"
		}
	}
	if utf8.Valid(p) {
		return string(p), "text"
	}
	return hex.Dump(p), "binary (hex dump)"
}

// templateFuncs format values for the templates.
var templateFuncs = map[string]any{
	"duration": shortDuration,
	"when":     when,
	"clock":    clock,
	"bytes": func(n int) string {
		if n < 1024 {
			return strconv.Itoa(n) + " B"
		}
		return strconv.FormatFloat(float64(n)/1024, 'f', 1, 64) + " KiB"
	},
}

// when shows a time on the Redis clock: UTC to the millisecond in a <time> element, and how
// far it is from now on this machine's clock; "–" for the zero time.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "–"
	}
	rel := "in " + shortDuration(time.Until(t))
	if d := time.Since(t); d > 0 {
		rel = shortDuration(d) + " ago"
	}
	u := t.UTC()
	return template.HTML(`<time datetime="` + u.Format(time.RFC3339Nano) + `">` + u.Format("2006-01-02 15:04:05.000 UTC") +
		`</time> <span class="muted">` + rel + "</span>")
}

// clock shows the time of day of t in UTC, to the second, in a <time> element.
func clock(t time.Time) template.HTML {
	u := t.UTC()
	return template.HTML(`<time datetime="` + u.Format(time.RFC3339) + `">` + u.Format("15:04:05") + ` UTC</time>`)
}

// shortDuration rounds d to about three significant figures: 1.23s, 4m5s, 820µs.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	return d.String()
}
