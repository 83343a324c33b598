package dashboard

// This file owns the actions: the POST handlers that pause and resume a group and cancel,
// reschedule, run now and requeue a message, the redirect after each with its notice, and the
// reading of the reschedule form. The actions on schedules are in schedule.go.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// The actions are POST forms that work without JavaScript: each acts through the Inspector and
// answers 303 See Other to the page that shows the result, with ?done= naming a notice.

// act wraps an action on a group or message: it refuses it unless mayPost agrees, then checks
// the topic and group (400, 404) and runs f.
func (s *server) act(f func(w http.ResponseWriter, r *http.Request, topic, group string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.mayPost(w, r) {
			return
		}
		topic, group, ok := s.target(w, r)
		if ok {
			f(w, r, topic, group)
		}
	}
}

// mayPost reports whether r may act: actions are allowed and Authorize agrees; otherwise it
// answers 403 Forbidden.
func (s *server) mayPost(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case !s.opts.AllowActions:
		s.problem(w, http.StatusForbidden, "this dashboard is read-only: it takes no actions")
		return false
	case s.opts.Authorize != nil && !s.opts.Authorize(r):
		s.problem(w, http.StatusForbidden, "you are not authorized to act on queues")
		return false
	}
	return true
}

func (s *server) pause(w http.ResponseWriter, r *http.Request, topic, group string) {
	if err := s.in.Pause(r.Context(), topic, group); err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, s.groupURL(topic, group, url.Values{"done": {"pause"}}), http.StatusSeeOther)
}

func (s *server) resume(w http.ResponseWriter, r *http.Request, topic, group string) {
	if err := s.in.Resume(r.Context(), topic, group); err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, s.groupURL(topic, group, url.Values{"done": {"resume"}}), http.StatusSeeOther)
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request, topic, group string) {
	ref, ok := s.ref(w, r)
	if !ok {
		return
	}
	res, err := s.in.Cancel(r.Context(), topic, redisdelay.ByRef(group, ref))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, r, topic, group, "cancel", res.Groups[group], "")
}

func (s *server) reschedule(w http.ResponseWriter, r *http.Request, topic, group string) {
	ref, ok := s.ref(w, r)
	if !ok {
		return
	}
	due, err := parseDue(r.PostFormValue("at"), r.PostFormValue("after"), time.Now())
	if err != nil {
		s.problem(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.in.Reschedule(r.Context(), topic, redisdelay.ByRef(group, ref), due)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, r, topic, group, "reschedule", res.Groups[group], ref)
}

func (s *server) runNow(w http.ResponseWriter, r *http.Request, topic, group string) {
	ref, ok := s.ref(w, r)
	if !ok {
		return
	}
	res, err := s.in.RunNow(r.Context(), topic, redisdelay.ByRef(group, ref))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, r, topic, group, "run-now", res.Groups[group], ref)
}

func (s *server) requeue(w http.ResponseWriter, r *http.Request, topic, group string) {
	ref, ok := s.ref(w, r)
	if !ok {
		return
	}
	n, err := s.in.Requeue(r.Context(), topic, group, ref)
	if err != nil {
		s.fail(w, err)
		return
	}
	o := redisdelay.OutcomeApplied
	if n == 0 {
		o = redisdelay.OutcomeNotFound
	}
	s.done(w, r, topic, group, "requeue", o, "")
}

// ref returns the ref (MessageInfo.Ref) that the form names, in its body or, as the
// dashboard's forms do, in its URL's query; or answers 400 when there is none.
func (s *server) ref(w http.ResponseWriter, r *http.Request) (string, bool) {
	ref := r.FormValue("ref")
	if ref == "" {
		s.problem(w, http.StatusBadRequest, "the form names no message (ref is empty)")
	}
	return ref, ref != ""
}

// done redirects after an action on one message: to the message's page when ref is given and
// the group still holds it, else to the group's tab that the form came from.
func (s *server) done(w http.ResponseWriter, r *http.Request, topic, group, action string, o redisdelay.Outcome, ref string) {
	q := url.Values{"done": {action + ":" + o.String()}}
	if ref != "" && o != redisdelay.OutcomeNotFound {
		q.Set("ref", ref)
		http.Redirect(w, r, s.messageURL(topic, group, "", q), http.StatusSeeOther)
		return
	}
	state := r.PostFormValue("state")
	if !slices.ContainsFunc(states, func(t stateTab) bool { return string(t.State) == state }) {
		state = string(redisdelay.StateScheduled)
	}
	q.Set("state", state)
	http.Redirect(w, r, s.groupURL(topic, group, q), http.StatusSeeOther)
}

// notices are the texts a page shows after an action, by its ?done= value: the action, and
// for an action on a message, ":" and its Outcome.
var notices = map[string]string{
	"pause":                "The group is paused: its consumers receive nothing until it is resumed.",
	"resume":               "The group is resumed.",
	"cancel:applied":       "The message was cancelled.",
	"cancel:in-flight":     "The message was cancelled. The delivery under way finishes, but its ack or nack is refused.",
	"cancel:not-found":     "The group no longer held the message: nothing was cancelled.",
	"reschedule:applied":   "The message was rescheduled.",
	"reschedule:in-flight": "A consumer holds the message, so it was not rescheduled.",
	"reschedule:not-found": "The group no longer held the message: nothing was rescheduled.",
	"run-now:applied":      "The message is due now.",
	"run-now:in-flight":    "A consumer holds the message already.",
	"run-now:not-found":    "The group no longer held the message.",
	"requeue:applied":      "The dead letter was requeued, due now.",
	"requeue:not-found":    "It was no longer a dead letter: nothing was requeued.",

	"schedule-pause":            "The schedule is paused: no tick falls due until it is resumed, and the ticks of the pause are not caught up.",
	"schedule-pause:unchanged":  "The schedule was paused already.",
	"schedule-resume":           "The schedule is resumed: its next tick is the first after now.",
	"schedule-resume:unchanged": "The schedule was not paused.",
	"schedule-trigger":          "The schedule's message was published, due now; its ticks go on as before.",
	"schedule-delete":           "The schedule was deleted: none of its ticks is published any more.",
}

// notice returns the text for a ?done= value; "" for none or an unknown one, so that a link
// cannot make the page say anything else.
func notice(done string) string { return notices[done] }

// dueLayouts are the time formats the reschedule form accepts in "at": RFC 3339, and without a
// zone (UTC) the values of an <input type="datetime-local">.
var dueLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"}

// parseDue reads the reschedule form: either at, a time in one of dueLayouts, or after, a
// duration from now in Go's syntax ("90s", "2h30m"), not negative. Exactly one must be given.
func parseDue(at, after string, now time.Time) (time.Time, error) {
	at, after = strings.TrimSpace(at), strings.TrimSpace(after)
	switch {
	case at != "" && after != "":
		return time.Time{}, errors.New("give either a due time or a delay, not both")
	case after != "":
		d, err := time.ParseDuration(after)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("delay %q is not a duration such as 90s or 2h30m", after)
		}
		return now.Add(d), nil
	case at != "":
		for _, layout := range dueLayouts {
			if t, err := time.ParseInLocation(layout, at, time.UTC); err == nil {
				return t, nil
			}
		}
		return time.Time{}, fmt.Errorf("due time %q is not a time such as 2030-01-02T15:04:05Z", at)
	}
	return time.Time{}, errors.New("give a due time or a delay")
}
