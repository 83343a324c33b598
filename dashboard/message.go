package dashboard

// This file owns the message page: finding the message a request names (by ref, key or the
// search box's exact ref or key) and showing its state, payload, metadata and action forms.

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

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
	m, dead, ok := s.find(w, r, topic, group)
	if !ok {
		return
	}
	v, tab := s.messageView(r, topic, group, m, dead)
	groupLabel := group
	if group == redisdelay.ParkedGroup {
		v.Means, groupLabel = parkedMeans, "parked (no consumer group)"
	}
	name := cmp.Or(m.Key, m.UUID, m.ID)
	s.render(w, http.StatusOK, "message", page{
		Title: "Message " + name,
		Crumbs: []crumb{{Label: topic}, {Label: groupLabel, URL: s.groupURL(topic, group, nil)},
			{Label: tab.Label, URL: s.groupURL(topic, group, url.Values{"state": {v.ReturnState}})}, {Label: name}},
		Notice: notice(r.URL.Query().Get("done")),
		Body:   v,
	})
}

// find returns the message that r names, and whether it is a dead letter; or reports the error
// and false: 400 when r names none, as fail does for the rest.
func (s *server) find(w http.ResponseWriter, r *http.Request, topic, group string) (redisdelay.MessageInfo, bool, bool) {
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
		m, err = s.in.Message(r.Context(), topic, redisdelay.ByKey(q.Get("key")).InGroup(group))
	case strings.TrimSpace(q.Get("q")) != "":
		m, dead, err = s.search(r.Context(), topic, group, strings.TrimSpace(q.Get("q")))
	default:
		s.problem(w, http.StatusBadRequest, "name the message with ref, key or q")
		return m, false, false
	}
	if err != nil {
		s.fail(w, err)
		return m, false, false
	}
	return m, dead, true
}

// messageView returns what the message page shows of m, and the state tab of the group page
// that lists it.
func (s *server) messageView(r *http.Request, topic, group string, m redisdelay.MessageInfo, dead bool) (messageView, stateTab) {
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
	v.Metadata = sortedMetadata(m.Metadata)
	// The forms carry the ref in their URL, percent-encoded: a ref can hold any byte (the
	// member of a message stored inline holds the marshaled message), which a form field in a
	// UTF-8 page would not carry intact.
	ref := url.Values{"ref": {m.Ref}}
	v.CancelURL = s.messageURL(topic, group, "/cancel", ref)
	v.RescheduleURL = s.messageURL(topic, group, "/reschedule", ref)
	v.RunNowURL = s.messageURL(topic, group, "/run-now", ref)
	v.RequeueURL = s.messageURL(topic, group, "/requeue", ref)
	return v, tab
}

// sortedMetadata returns the entries of md sorted by key; nil when there are none.
func sortedMetadata(md map[string]string) [][2]string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sorted [][2]string
	for _, k := range keys {
		sorted = append(sorted, [2]string{k, md[k]})
	}
	return sorted
}

// byRef finds the message ref names: a dead letter (redisdelay.ByDeadLetter) or a message the
// group holds (redisdelay.ByRef), reading that one message with Inspector.Message. It reports
// whether the message is a dead letter.
func (s *server) byRef(ctx context.Context, topic, group, ref string, dead bool) (redisdelay.MessageInfo, bool, error) {
	t := redisdelay.ByRef(group, ref)
	if dead {
		t = redisdelay.ByDeadLetter(group, ref)
	}
	m, err := s.in.Message(ctx, topic, t)
	return m, dead, err
}

// search finds the message whose ref or key is exactly q: as a ref (of a message the group
// holds, then of a dead letter) when q has the shape of one, then as a key.
func (s *server) search(ctx context.Context, topic, group, q string) (redisdelay.MessageInfo, bool, error) {
	if isRef(q) {
		m, err := s.in.Message(ctx, topic, redisdelay.ByRef(group, q))
		if !errors.Is(err, redisdelay.ErrNotFound) {
			return m, false, err
		}
		m, dead, err := s.byRef(ctx, topic, group, q, true)
		if !errors.Is(err, redisdelay.ErrNotFound) || redisdelay.ValidateKey(q) != nil {
			return m, dead, err
		}
	}
	m, err := s.in.Message(ctx, topic, redisdelay.ByKey(q).InGroup(group))
	return m, false, err
}

// isRef reports whether q has the shape of MessageInfo.Ref: a partition number, '/', a member.
func isRef(q string) bool {
	p, member, ok := strings.Cut(q, "/")
	_, err := strconv.Atoi(p)
	return ok && err == nil && member != ""
}
