package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// workerRows returns the data-worker (ID) and data-kind of each row of a workers page.
func workerRows(body string) [][2]string {
	var out [][2]string
	for _, m := range regexp.MustCompile(`<tr data-worker="([^"]*)" data-kind="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, [2]string{html.UnescapeString(m[1]), m[2]})
	}
	return out
}

// workerCell returns the text of one column of one worker's row, tags removed.
func workerCell(t *testing.T, body, id, stat string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-worker="` + regexp.QuoteMeta(html.EscapeString(id)) + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, row, "no row for worker %s", id)
	m := regexp.MustCompile(`(?s)data-stat="` + stat + `">(.*?)</td>`).FindStringSubmatch(row[1])
	require.NotNil(t, m, "no %s cell", stat)
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

// workers returns every worker record of kind, waiting until there are n.
func (q *queue) workers(kind redisdelay.WorkerKind, n int) []redisdelay.WorkerInfo {
	var page redisdelay.WorkersPage
	require.Eventually(q.t, func() bool {
		var err error
		page, err = q.in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: kind, Limit: redisdelay.MaxListLimit})
		return err == nil && len(page.Workers) == n
	}, 10*time.Second, 10*time.Millisecond, "%d %s records", n, kind)
	return page.Workers
}

func TestWorkersPageListsTheRunningSubscribersAndSchedulers(t *testing.T) {
	q := newQueue(t)
	sub := q.subscriber("billing", 0)
	_, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	sch := q.scheduler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	subscriber := q.workers(redisdelay.WorkerSubscriber, 1)[0]
	scheduler := q.workers(redisdelay.WorkerScheduler, 1)[0]
	srv := q.serve(dashboard.Options{Prefix: "/queues"})

	overview := get(t, srv.URL+"/queues/")
	res := get(t, srv.URL+"/queues"+link(t, overview.body, "/workers")[len("/queues"):])
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.ElementsMatch(t, [][2]string{{subscriber.ID, "subscriber"}, {scheduler.ID, "scheduler"}}, workerRows(res.body))
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, workerCell(t, res.body, subscriber.ID, "host"))
	assert.Equal(t, strconv.Itoa(os.Getpid()), workerCell(t, res.body, subscriber.ID, "pid"))
	assert.Equal(t, "orders · billing", workerCell(t, res.body, subscriber.ID, "subscriptions"))
	assert.Equal(t, "/queues/topic/orders/group/billing", link(t, res.body, "/group/billing"))
	assert.Equal(t, "0", workerCell(t, res.body, subscriber.ID, "in-flight"))
	assert.Contains(t, workerCell(t, res.body, subscriber.ID, "last-beat"), " ago")
	assert.Contains(t, workerCell(t, res.body, subscriber.ID, "expires"), "in ")
	assert.Equal(t, "redisdelay.schedules · scheduler", workerCell(t, res.body, scheduler.ID, "subscriptions"))

	// A closed Subscriber deletes its record: the page no longer lists it.
	require.NoError(t, sub.Close())
	q.workers(redisdelay.WorkerSubscriber, 0)
	res = get(t, srv.URL+"/queues/workers")
	assert.Equal(t, [][2]string{{scheduler.ID, "scheduler"}}, workerRows(res.body))
}

func TestWorkersPageListsOnePageOfWorkersWithANextPageLink(t *testing.T) {
	q := newQueue(t)
	for i := range 51 {
		_, err := q.subscriber(fmt.Sprintf("group-%02d", i), 0).Subscribe(context.Background(), "orders")
		require.NoError(t, err)
	}
	q.workers(redisdelay.WorkerSubscriber, 51)
	srv := q.serve(dashboard.Options{})

	first := get(t, srv.URL+"/workers")
	require.Equal(t, http.StatusOK, first.status, first.body)
	rows := workerRows(first.body)
	assert.Len(t, rows, 50)
	next := pageLink(first.body, nextRE)
	require.NotEmpty(t, next)
	second := get(t, srv.URL+next)
	require.Equal(t, http.StatusOK, second.status, second.body)
	rest := workerRows(second.body)
	require.Len(t, rest, 1)
	assert.NotContains(t, rows, rest[0])
	assert.Empty(t, pageLink(second.body, nextRE))
	assert.Equal(t, "/workers", pageLink(second.body, firstRE))
}

func TestWorkersPageSaysWhenNothingRunsAndRefusesABadCursor(t *testing.T) {
	q := newQueue(t)
	srv := q.serve(dashboard.Options{})
	res := get(t, srv.URL+"/workers")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Contains(t, res.body, `id="no-workers"`)
	bad := get(t, srv.URL+"/workers?cursor=%3Cnot+a+cursor%3E")
	assert.Equal(t, http.StatusBadRequest, bad.status, bad.body)
	assert.NotContains(t, bad.body, "<not a cursor>")
}

func TestWorkersPageListsOnlyTheSubscriptionsOfTheDashboardsTopics(t *testing.T) {
	q := newQueue(t)
	sub := q.subscriber("billing", 0)
	for _, topic := range []string{"orders", "secret-ledger"} {
		_, err := sub.Subscribe(context.Background(), topic)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		w := q.workers(redisdelay.WorkerSubscriber, 1)[0]
		return len(w.Subscriptions) == 2
	}, 10*time.Second, 10*time.Millisecond)
	id := q.workers(redisdelay.WorkerSubscriber, 1)[0].ID
	srv := q.serve(dashboard.Options{Topics: []string{"orders"}})

	res := get(t, srv.URL+"/workers")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Equal(t, "orders · billing and 1 more", workerCell(t, res.body, id, "subscriptions"))
	assert.NotContains(t, res.body, "secret-ledger")
}
