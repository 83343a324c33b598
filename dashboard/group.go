package dashboard

// This file owns the group page: a consumer group's (or a topic's parked messages') stats,
// state tabs, one page of its messages in one state, its forecast, and its action forms.

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// pageSize is how many messages a group page lists.
const pageSize = 50

// stateTab describes one state tab of a group page.
type stateTab struct {
	State redisdelay.State
	Label string
	At    string // what the time column of the state shows
	Means string // what a message in this state is waiting for
}

// states are the tabs of a group page, in order; the parked messages of a topic with no group
// have the first two.
var states = []stateTab{
	{redisdelay.StateScheduled, "Scheduled", "Due at", "Due later: they wait for their due time."},
	{redisdelay.StateDue, "Due now", "Due at", "Their due time has passed: they wait for a consumer of the group to claim them."},
	{redisdelay.StateInFlight, "In flight", "Lease deadline", "Claimed by a consumer and hidden from the others until the lease deadline; a message not acked by then is delivered again."},
	{redisdelay.StateDeadLettered, "Dead letters", "Died at", "They ran out of attempts and wait on the group's dead-letter topic; requeue one to deliver it to the group again."},
}

// parkedMeans says what the parked messages of a topic with no group wait for.
const parkedMeans = "Published while the topic had no consumer group, they wait, parked, for the first group to subscribe, which receives them all."

// tabsOf returns the state tabs of group's page.
func tabsOf(group string) []stateTab {
	if group == redisdelay.ParkedGroup {
		return states[:2]
	}
	return states
}

// tab is one state tab of a group page.
type tab struct {
	Label  string
	Count  int64
	URL    string
	Active bool
	Level  level
}

// listedMessage is one row of a group page.
type listedMessage struct {
	redisdelay.MessageInfo
	URL string
	At  time.Time // due time, lease deadline or dead-lettering time
}

// groupView is what a group page shows: a consumer group's, or the parked messages of a topic
// with no group (Parked).
type groupView struct {
	Topic, Group, State, DeadLetterTopic string
	Parked                               bool
	Tab                                  stateTab
	Stats                                redisdelay.GroupStats
	Levels                               groupLevels
	Tabs                                 []tab
	Messages                             []listedMessage
	Dead                                 bool
	Next, First                          string
	Search                               string
	Actions                              bool
	PauseURL, ResumeURL                  string
	Forecast                             forecastView
	Live                                 live
	// Internal is set on the pages of the schedules' tick topic (schedule.TickTopic), which link
	// to the Schedules and Workers pages.
	Internal                 bool
	SchedulesURL, WorkersURL string
}

// group renders a group's stats, its due-time forecast, one page of its messages in one state,
// and its actions.
func (s *server) group(w http.ResponseWriter, r *http.Request) {
	topic, group, ok := s.target(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	current, ok := s.stateTab(w, group, redisdelay.State(q.Get("state")))
	if !ok {
		return
	}
	span := spanOf(q.Get("forecast"))
	d, ok := s.readGroup(w, r, topic, group, current.State, span)
	if !ok {
		return
	}
	v := s.groupView(r, topic, group, current, span, d)
	label := group
	if v.Parked {
		label, v.Tab.Means = "parked (no consumer group)", parkedMeans
	}
	s.render(w, http.StatusOK, "group", page{
		Title:  label + " · " + topic,
		Crumbs: []crumb{{Label: topic}, {Label: label, URL: s.groupURL(topic, group, nil)}},
		Notice: notice(q.Get("done")),
		Body:   v,
	})
}

// stateTab returns the tab of group's page that ?state= names, the first when it names none;
// or answers 400 and false for a state the page has no tab for.
func (s *server) stateTab(w http.ResponseWriter, group string, state redisdelay.State) (stateTab, bool) {
	tabs := tabsOf(group)
	if state == "" {
		state = redisdelay.StateScheduled
	}
	current := slices.IndexFunc(tabs, func(t stateTab) bool { return t.State == state })
	if current < 0 {
		s.problem(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q: want one of %s", state, stateNames(tabs)))
		return stateTab{}, false
	}
	return tabs[current], true
}

// groupData is what a group page reads from Redis.
type groupData struct {
	Stats    redisdelay.GroupStats
	List     redisdelay.ListPage
	Forecast redisdelay.Forecast
}

// readGroup reads group's stats, the page of its messages in state that ?cursor= names, and its
// forecast over span; or reports the error and false.
func (s *server) readGroup(w http.ResponseWriter, r *http.Request, topic, group string, state redisdelay.State, span forecastSpan) (groupData, bool) {
	var (
		d   groupData
		err error
		ok  bool
	)
	d.Stats, err = s.groupStats(r.Context(), topic, group)
	if err != nil {
		s.fail(w, err)
		return d, false
	}
	d.List, ok = s.list(w, r, topic, group, state, r.URL.Query().Get("cursor"))
	if !ok {
		return d, false
	}
	d.Forecast, err = s.in.Forecast(r.Context(), topic, group, span.Bucket, span.Buckets)
	if err != nil {
		s.fail(w, err)
		return d, false
	}
	return d, true
}

// groupView returns what the page of group shows of d, on the tab current with the forecast
// over span.
func (s *server) groupView(r *http.Request, topic, group string, current stateTab, span forecastSpan, d groupData) groupView {
	state := current.State
	self := s.groupURL(topic, group, nil)
	v := groupView{
		Topic: topic, Group: group, State: string(state), DeadLetterTopic: redisdelay.DefaultDeadLetterTopic(topic, group),
		Parked: group == redisdelay.ParkedGroup, Tab: current, Stats: d.Stats, Levels: s.opts.Thresholds.levels(d.Stats),
		Dead: state == redisdelay.StateDeadLettered, Search: s.messageURL(topic, group, "", nil),
		PauseURL: self + "/pause", ResumeURL: self + "/resume", Live: s.live(r),
	}
	v.Actions = s.mayAct(r) && !v.Parked
	v.Internal = topic == schedule.TickTopic
	v.SchedulesURL, v.WorkersURL = s.schedulesURL("", nil), s.workersURL("")
	v.Tabs = s.groupTabs(topic, group, d.Stats, v.Levels, state, span)
	v.Messages = s.listedMessages(topic, group, state, d.List.Messages)
	if d.List.NextCursor != "" {
		v.Next = s.groupURL(topic, group, url.Values{"state": {string(state)}, "cursor": {d.List.NextCursor}})
	}
	if r.URL.Query().Get("cursor") != "" {
		v.First = s.groupURL(topic, group, url.Values{"state": {string(state)}})
	}
	v.Forecast = s.forecastView(topic, group, state, span, d.Forecast)
	return v
}

// stateNames lists the states of tabs for an error message.
func stateNames(tabs []stateTab) string {
	var names string
	for n, t := range tabs {
		if n > 0 {
			names += ", "
		}
		names += string(t.State)
	}
	return names
}

// list returns one page of group's messages in state after cursor, or reports the error and
// false: 400 for a malformed cursor, as fail does for the rest.
func (s *server) list(w http.ResponseWriter, r *http.Request, topic, group string, state redisdelay.State, cursor string) (redisdelay.ListPage, bool) {
	list, err := s.in.List(r.Context(), topic, group, redisdelay.ListOptions{State: state, Cursor: cursor, Limit: pageSize})
	if err == nil {
		return list, true
	}
	// List's error for a malformed cursor wraps no sentinel: tell it from a Redis failure by
	// listing again without the cursor.
	if cursor != "" && !errors.Is(err, redisdelay.ErrNotFound) {
		if _, again := s.in.List(r.Context(), topic, group, redisdelay.ListOptions{State: state, Limit: 1}); again == nil {
			s.problem(w, http.StatusBadRequest, err.Error())
			return list, false
		}
	}
	s.fail(w, err)
	return list, false
}

// groupTabs returns the state tabs of a group page with their counts and levels; the tab of
// state is active, and every tab keeps the forecast span.
func (s *server) groupTabs(topic, group string, st redisdelay.GroupStats, lv groupLevels, state redisdelay.State, span forecastSpan) []tab {
	counts := map[redisdelay.State]int64{
		redisdelay.StateScheduled: st.Scheduled, redisdelay.StateDue: st.Due,
		redisdelay.StateInFlight: st.InFlight, redisdelay.StateDeadLettered: st.DeadLetters,
	}
	levels := map[redisdelay.State]level{redisdelay.StateDue: lv.Overdue, redisdelay.StateDeadLettered: lv.Dead}
	var tabs []tab
	for _, t := range tabsOf(group) {
		q := url.Values{"state": {string(t.State)}}
		if span.Name != forecastSpans[0].Name {
			q.Set("forecast", span.Name)
		}
		tabs = append(tabs, tab{Label: t.Label, Count: counts[t.State], Active: t.State == state, Level: levels[t.State],
			URL: s.groupURL(topic, group, q)})
	}
	return tabs
}

// listedMessages returns the rows of a group page, each with the URL of its message's page.
func (s *server) listedMessages(topic, group string, state redisdelay.State, list []redisdelay.MessageInfo) []listedMessage {
	msgs := make([]listedMessage, len(list))
	for n, m := range list {
		link := url.Values{"ref": {m.Ref}}
		if state == redisdelay.StateDeadLettered {
			link.Set("state", string(state))
		}
		at := m.DueAt
		if m.State == redisdelay.StateInFlight {
			at = m.LeaseDeadline
		}
		msgs[n] = listedMessage{MessageInfo: m, URL: s.messageURL(topic, group, "", link), At: at}
	}
	return msgs
}

// groupStats returns the Stats of one group (or of the parked messages, for ParkedGroup), or an
// error wrapping ErrNotFound.
func (s *server) groupStats(ctx context.Context, topic, group string) (redisdelay.GroupStats, error) {
	all, err := s.in.Stats(ctx, topic)
	if err != nil {
		return redisdelay.GroupStats{}, err
	}
	for _, st := range all {
		if st.Group == group {
			return st, nil
		}
	}
	if group == redisdelay.ParkedGroup {
		return redisdelay.GroupStats{}, fmt.Errorf("topic %q has consumer groups, so no message waits parked: %w", topic, redisdelay.ErrNotFound)
	}
	return redisdelay.GroupStats{}, fmt.Errorf("consumer group %q on topic %q: %w", group, topic, redisdelay.ErrNotFound)
}

// forecastView is the due-time forecast of a group page.
type forecastView struct {
	Chart    template.HTML
	Span     forecastSpan
	Spans    []spanLink
	Forecast redisdelay.Forecast
}

// spanLink is a link to the group page with another forecast span.
type spanLink struct {
	Label, URL string
	Active     bool
}

// spanOf returns the forecast span that ?forecast= names, the first for any other value.
func spanOf(name string) forecastSpan {
	for _, sp := range forecastSpans {
		if sp.Name == name {
			return sp
		}
	}
	return forecastSpans[0]
}

// forecastView draws fc, counted over span, with links to the other spans that keep the tab.
func (s *server) forecastView(topic, group string, state redisdelay.State, span forecastSpan, fc redisdelay.Forecast) forecastView {
	v := forecastView{Chart: forecastChart(fc.Counts, fc.Start, fc.Bucket), Span: span, Forecast: fc}
	for _, sp := range forecastSpans {
		v.Spans = append(v.Spans, spanLink{Label: sp.Label, Active: sp.Name == span.Name,
			URL: s.groupURL(topic, group, url.Values{"state": {string(state)}, "forecast": {sp.Name}})})
	}
	return v
}
