package dashboard

// This file owns the schedule pages: one page of periodic schedules, a page per schedule with
// its definition, state and next ticks, and their actions (pause, resume, trigger, delete),
// which go through Options.Scheduler.

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// schedulePageSize is how many schedules the schedules page lists.
const schedulePageSize = 50

// scheduleRow is one schedule on the schedules page, or the schedule of a schedule page.
type scheduleRow struct {
	schedule.Info
	URL  string
	Zone string // the time zone the spec is read in: UTC when the schedule names none
}

// schedulesView is what the schedules page shows.
type schedulesView struct {
	Rows    []scheduleRow
	Overdue []scheduleRow // those of Rows whose pending tick is overdue (schedule.Info.Overdue)
	// OverdueReasons are the distinct schedule.Info.OverdueReason of Overdue, in order.
	OverdueReasons []string
	Next, First    string
	Hidden         int    // schedules on this page whose topic is not on the dashboard
	ReadOnly       string // why the schedule pages take no action; "" when they do
}

// tickView is one coming tick: its instant, its wall time in the schedule's time zone, and
// whether it is the armed one (Info.Pending), which may be past when no Scheduler acted on it.
type tickView struct {
	At      time.Time
	Wall    string
	Pending bool
}

// scheduleView is what a schedule page shows.
type scheduleView struct {
	scheduleRow
	Ticks                                      []tickView
	Payload, PayloadKind                       string
	Metadata                                   [][2]string
	Actions                                    bool
	ReadOnly                                   string
	PauseURL, ResumeURL, TriggerURL, DeleteURL string
}

// schedulesURL is the URL of the schedules page from the first schedule after after ("" from
// the first), with query q (nil for none).
func (s *server) schedulesURL(after string, q url.Values) string {
	if after != "" {
		if q == nil {
			q = url.Values{}
		}
		q.Set("after", after)
	}
	u := s.opts.Prefix + "/schedules"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// scheduleURL is the URL of a schedule's page, or of one of its actions, with query q. The name
// is path-escaped, so that any name is one path segment.
func (s *server) scheduleURL(name, action string, q url.Values) string {
	u := s.opts.Prefix + "/schedules/" + url.PathEscape(name) + action
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// onDashboard reports whether the schedule publishes to a topic on the dashboard (see
// Options.Topics).
func (s *server) onDashboard(info schedule.Info) bool {
	return s.topics == nil || s.topics[info.Schedule.Topic]
}

// checkScheduler refuses a Scheduler whose Publisher has another Redis client or key prefix
// than in: its actions would change schedules other than those the pages show.
func checkScheduler(in *redisdelay.Inspector, sch *schedule.Scheduler) error {
	if sch == nil {
		return nil
	}
	pub, insp := seam.PublisherOf(seam.SchedulerPublisher(sch)), seam.InspectorOf(in)
	if !seam.SameLayout(pub, insp) {
		return fmt.Errorf("dashboard: Options.Scheduler's Publisher has Redis client %p and key prefix %q, the Inspector %p and %q: give both the same client and key prefix", pub.Client(), pub.KeyPrefix(), insp.Client(), insp.KeyPrefix())
	}
	return nil
}

// readOnlySchedules says why r may not act on schedules; "" when it may.
func (s *server) readOnlySchedules(r *http.Request) string {
	switch {
	case !s.opts.AllowActions:
		return "This dashboard is read-only: it takes no actions."
	case s.opts.Scheduler == nil:
		return "Schedules are read-only here: this dashboard was given no Scheduler (dashboard.Options.Scheduler)."
	case !s.mayAct(r):
		return "You are not authorized to act on schedules."
	}
	return ""
}

func (s *server) row(info schedule.Info) scheduleRow {
	zone := info.Schedule.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return scheduleRow{Info: info, URL: s.scheduleURL(info.Schedule.Name, "", nil), Zone: zone}
}

// schedules renders one page of schedules in name order, from the first after ?after=.
func (s *server) schedules(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	infos, more, err := schedule.List(r.Context(), s.in, after, schedulePageSize)
	if err != nil {
		s.fail(w, err)
		return
	}
	v := schedulesView{ReadOnly: s.readOnlySchedules(r)}
	for _, info := range infos {
		if !s.onDashboard(info) {
			v.Hidden++
			continue
		}
		v.Rows = append(v.Rows, s.row(info))
		if info.Overdue {
			v.Overdue = append(v.Overdue, s.row(info))
			if !slices.Contains(v.OverdueReasons, info.OverdueReason) {
				v.OverdueReasons = append(v.OverdueReasons, info.OverdueReason)
			}
		}
	}
	if more && len(infos) > 0 {
		v.Next = s.schedulesURL(infos[len(infos)-1].Schedule.Name, nil)
	}
	if after != "" {
		v.First = s.schedulesURL("", nil)
	}
	s.render(w, http.StatusOK, "schedules", page{
		Title:  "Schedules",
		Crumbs: []crumb{{Label: "Schedules", URL: s.schedulesURL("", nil)}},
		Notice: notice(r.URL.Query().Get("done")),
		Body:   v,
	})
}

// readSchedule returns the schedule the request names, or reports the error and false: 400 for
// a name that cannot exist, 404 for a schedule that does not or whose topic is not on the
// dashboard.
func (s *server) readSchedule(w http.ResponseWriter, r *http.Request) (schedule.Info, bool) {
	name := r.PathValue("schedule")
	if err := redisdelay.ValidateName("schedule", name); err != nil {
		s.fail(w, err)
		return schedule.Info{}, false
	}
	info, err := schedule.Get(r.Context(), s.in, name)
	if err == nil && !s.onDashboard(info) {
		err = fmt.Errorf("schedule %q publishes to topic %q, which is not on this dashboard: %w", name, info.Schedule.Topic, redisdelay.ErrNotFound)
	}
	if err != nil {
		s.fail(w, err)
		return schedule.Info{}, false
	}
	return info, true
}

// schedule renders a schedule's definition, state, counts, next ticks and actions.
func (s *server) schedule(w http.ResponseWriter, r *http.Request) {
	info, ok := s.readSchedule(w, r)
	if !ok {
		return
	}
	name := info.Schedule.Name
	v := scheduleView{scheduleRow: s.row(info), ReadOnly: s.readOnlySchedules(r)}
	v.Actions = v.ReadOnly == ""
	v.PauseURL, v.ResumeURL = s.scheduleURL(name, "/pause", nil), s.scheduleURL(name, "/resume", nil)
	v.TriggerURL, v.DeleteURL = s.scheduleURL(name, "/trigger", nil), s.scheduleURL(name, "/delete", nil)
	v.Ticks = nextTicks(info)
	v.Payload, v.PayloadKind = formatPayload(info.Schedule.Payload)
	for _, k := range slices.Sorted(maps.Keys(info.Schedule.Metadata)) {
		v.Metadata = append(v.Metadata, [2]string{k, info.Schedule.Metadata[k]})
	}
	s.render(w, http.StatusOK, "schedule", page{
		Title:  name + " · schedules",
		Crumbs: []crumb{{Label: "Schedules", URL: s.schedulesURL("", nil)}, {Label: name, URL: v.URL}},
		Notice: notice(r.URL.Query().Get("done")),
		Body:   v,
	})
}

// actSchedule wraps an action on a schedule: it refuses with 403 Forbidden unless actions are
// allowed, Authorize agrees and the dashboard has a Scheduler, then reads the schedule (400,
// 404) and runs f.
func (s *server) actSchedule(f func(w http.ResponseWriter, r *http.Request, sch *schedule.Scheduler, name string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.mayPost(w, r) {
			return
		}
		if s.opts.Scheduler == nil {
			s.problem(w, http.StatusForbidden, "this dashboard was given no Scheduler: it takes no action on schedules")
			return
		}
		if info, ok := s.readSchedule(w, r); ok {
			f(w, r, s.opts.Scheduler, info.Schedule.Name)
		}
	}
}

// scheduleDone redirects to the schedule's page after an action, with ?done= naming its notice.
func (s *server) scheduleDone(w http.ResponseWriter, r *http.Request, name, done string) {
	http.Redirect(w, r, s.scheduleURL(name, "", url.Values{"done": {done}}), http.StatusSeeOther)
}

func (s *server) pauseSchedule(w http.ResponseWriter, r *http.Request, sch *schedule.Scheduler, name string) {
	changed, err := sch.Pause(r.Context(), name)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.scheduleDone(w, r, name, map[bool]string{true: "schedule-pause", false: "schedule-pause:unchanged"}[changed])
}

func (s *server) resumeSchedule(w http.ResponseWriter, r *http.Request, sch *schedule.Scheduler, name string) {
	changed, err := sch.Resume(r.Context(), name)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.scheduleDone(w, r, name, map[bool]string{true: "schedule-resume", false: "schedule-resume:unchanged"}[changed])
}

func (s *server) triggerSchedule(w http.ResponseWriter, r *http.Request, sch *schedule.Scheduler, name string) {
	if _, err := sch.Trigger(r.Context(), name); err != nil {
		s.fail(w, err)
		return
	}
	s.scheduleDone(w, r, name, "schedule-trigger")
}

func (s *server) deleteSchedule(w http.ResponseWriter, r *http.Request, sch *schedule.Scheduler, name string) {
	if err := sch.Delete(r.Context(), name); err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, s.schedulesURL("", url.Values{"done": {"schedule-delete"}}), http.StatusSeeOther)
}

// nextTicks returns the ticks a schedule page lists: the armed tick (Info.Pending), then those
// of Info.NextTicks after it. NextTicks start after the Redis clock's now, so when the armed
// tick is past (no Scheduler acted on it yet) it comes first, marked, instead of missing.
func nextTicks(info schedule.Info) []tickView {
	loc, err := time.LoadLocation(info.Schedule.TimeZone) // "" is UTC; the library loaded it already
	if err != nil {
		loc = time.UTC
	}
	view := func(t time.Time, pending bool) tickView {
		return tickView{At: t, Wall: t.In(loc).Format("Mon 2006-01-02 15:04:05 MST"), Pending: pending}
	}
	var out []tickView
	if !info.Pending.IsZero() {
		out = append(out, view(info.Pending, true))
	}
	for _, t := range info.NextTicks {
		if t.After(info.Pending) {
			out = append(out, view(t, false))
		}
	}
	return out
}
