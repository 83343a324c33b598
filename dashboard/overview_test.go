package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

func TestOverviewShowsTheStatsAndLatenessOfEveryGroup(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "later", 3, time.Hour)
	q.publish("orders", "now", 2, 0)
	q.deadLetters("emails", "sender", 2)
	q.publish("emails", "later", 1, time.Minute)
	require.NoError(t, q.in.Pause(context.Background(), "emails", "sender"))

	srv := q.serve(dashboard.Options{Lateness: latenessFunc(func(topic, group string) (time.Duration, time.Duration, bool) {
		return 12 * time.Millisecond, 340 * time.Millisecond, topic == "orders" && group == "billing"
	})})
	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)

	for _, g := range []string{"billing", "shipping"} {
		assert.Equal(t, "3", cell(t, res.body, "orders", g, "scheduled"), g)
		assert.Equal(t, "2", cell(t, res.body, "orders", g, "due"), g)
		assert.Equal(t, "0", cell(t, res.body, "orders", g, "in-flight"), g)
		assert.Equal(t, "0", cell(t, res.body, "orders", g, "dead"), g)
		assert.NotEqual(t, "–", cell(t, res.body, "orders", g, "oldest-due"), g)
		assert.Contains(t, cell(t, res.body, "orders", g, "next-due"), "<time datetime=", g)
		assert.Equal(t, "not paused", cell(t, res.body, "orders", g, "paused"), g)
	}
	assert.Equal(t, "12ms", cell(t, res.body, "orders", "billing", "lateness-p50"))
	assert.Equal(t, "340ms", cell(t, res.body, "orders", "billing", "lateness-p99"))
	assert.Equal(t, "–", cell(t, res.body, "orders", "shipping", "lateness-p50"))
	assert.Equal(t, "–", cell(t, res.body, "orders", "shipping", "lateness-p99"))

	assert.Equal(t, "1", cell(t, res.body, "emails", "sender", "scheduled"))
	assert.Equal(t, "2", cell(t, res.body, "emails", "sender", "dead"))
	assert.Contains(t, cell(t, res.body, "emails", "sender", "paused"), "paused")
	assert.Equal(t, "/topic/orders/group/billing", link(t, res.body, "/group/billing"))
}

func TestOverviewShowsOnlyTheTopicsOfOptionsTopics(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.register("emails", "sender")
	srv := q.serve(dashboard.Options{Topics: []string{"orders", "not-yet"}})

	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Contains(t, res.body, `data-topic="orders"`)
	assert.NotContains(t, res.body, `data-topic="emails"`)
	assert.Contains(t, res.body, "<code>not-yet</code>")
	assert.Equal(t, http.StatusNotFound, get(t, srv.URL+"/topic/emails/group/sender").status)
	assert.Equal(t, http.StatusOK, get(t, srv.URL+"/topic/orders/group/billing").status)
}

func TestOverviewEscapesNamesThatLookLikeHTML(t *testing.T) {
	q := newQueue(t)
	topic, group := `<b>"orders"</b>&'x'`, `<img src=x onerror=alert(1)>`
	q.register(topic, group)
	srv := q.serve(dashboard.Options{})

	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.NotContains(t, res.body, "<b>")
	assert.NotContains(t, res.body, "<img")
	assert.Equal(t, "0", cell(t, res.body, topic, group, "scheduled"))
	page := get(t, srv.URL+link(t, res.body, "/group/"))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.NotContains(t, page.body, "<img")
	assert.Contains(t, html.UnescapeString(page.body), group)
}

func TestOverviewWithoutLatenessSaysHowToShowIt(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")

	res := get(t, q.serve(dashboard.Options{}).URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.NotContains(t, res.body, "Lateness p50")
	assert.NotContains(t, res.body, `data-stat="lateness-p50"`)
	assert.Contains(t, res.body, `id="lateness-note"`)
	assert.Contains(t, res.body, "dashboard.Options{Lateness: m}")

	with := get(t, q.serve(dashboard.Options{Lateness: latenessFunc(func(string, string) (time.Duration, time.Duration, bool) {
		return 0, 0, false
	})}).URL+"/")
	assert.Contains(t, with.body, "Lateness p50")
	assert.NotContains(t, with.body, `id="lateness-note"`)
}

// latenessFunc is a dashboard.LatenessSource made of a function.
type latenessFunc func(topic, group string) (p50, p99 time.Duration, ok bool)

func (f latenessFunc) Lateness(topic, group string) (p50, p99 time.Duration, ok bool) {
	return f(topic, group)
}
