package dashboard

// This file owns the workers page: one page of the running Subscribers and Schedulers, as their
// heartbeat records (redisdelay.Inspector.Workers) show them.

import (
	"net/http"
	"net/url"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// workersPageSize is how many workers the workers page lists.
const workersPageSize = 50

// workerRow is one worker on the workers page.
type workerRow struct {
	redisdelay.WorkerInfo
	Subscriptions []subscriptionView
	Omitted       int // its subscriptions not listed: over MaxWorkerSubscriptions or not on the dashboard
}

// subscriptionView is one subscription of a worker, with the URL of its group's page.
type subscriptionView struct {
	redisdelay.WorkerSubscription
	URL string
}

// workersView is what the workers page shows.
type workersView struct {
	Rows        []workerRow
	Next, First string
	Now         time.Time
	Live        live
}

// workersURL is the URL of the workers page from cursor ("" for the first page).
func (s *server) workersURL(cursor string) string {
	u := s.opts.Prefix + "/workers"
	if cursor != "" {
		u += "?" + url.Values{"cursor": {cursor}}.Encode()
	}
	return u
}

// workers renders one page of the running Subscribers and Schedulers, from ?cursor=.
func (s *server) workers(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	wp, err := s.in.Workers(r.Context(), redisdelay.WorkersOptions{Limit: workersPageSize, Cursor: cursor})
	if err != nil {
		// The error for a malformed cursor wraps no sentinel: tell it from a Redis failure by
		// reading again without the cursor, as the group page does.
		if _, again := s.in.Workers(r.Context(), redisdelay.WorkersOptions{Limit: 1}); cursor != "" && again == nil {
			s.problem(w, http.StatusBadRequest, err.Error())
			return
		}
		s.fail(w, err)
		return
	}
	v := workersView{Live: s.live(r)}
	for _, info := range wp.Workers {
		v.Rows = append(v.Rows, s.workerRow(info))
	}
	if wp.NextCursor != "" {
		v.Next = s.workersURL(wp.NextCursor)
	}
	if cursor != "" {
		v.First = s.workersURL("")
	}
	s.render(w, http.StatusOK, "workers", page{
		Title:  "Workers",
		Crumbs: []crumb{{Label: "Workers", URL: s.workersURL("")}},
		Body:   v,
	})
}

// workerRow returns the row of a worker: its subscriptions on the dashboard (see
// Options.Topics), each linking to its group's page, and how many others it has.
func (s *server) workerRow(info redisdelay.WorkerInfo) workerRow {
	row := workerRow{WorkerInfo: info, Omitted: info.SubscriptionsOmitted}
	for _, sub := range info.Subscriptions {
		if s.topics != nil && !s.topics[sub.Topic] {
			row.Omitted++
			continue
		}
		row.Subscriptions = append(row.Subscriptions, subscriptionView{WorkerSubscription: sub, URL: s.groupURL(sub.Topic, sub.Group, nil)})
	}
	return row
}
