package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

func TestReadOnlyDashboardShowsNoActionsAndRefusesEveryPost(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "m", 1, time.Hour)
	q.deadLetters("mail", "sender", 1)
	srv := q.serve(dashboard.Options{})
	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref
	deadRef := q.first("mail", "sender", redisdelay.StateDeadLettered).Ref

	for _, u := range []string{
		"/", "/topic/orders/group/billing",
		"/topic/orders/group/billing/message?ref=" + url.QueryEscape(ref),
		"/topic/mail/group/sender?state=dead-lettered",
		"/topic/mail/group/sender/message?state=dead-lettered&ref=" + url.QueryEscape(deadRef),
	} {
		res := get(t, srv.URL+u)
		require.Equal(t, http.StatusOK, res.status, u)
		assert.NotContains(t, res.body, `method="post"`, u)
		assert.NotContains(t, res.body, `data-action=`, u)
	}
	for _, u := range []string{
		"/topic/orders/group/billing/pause", "/topic/orders/group/billing/resume",
		"/topic/orders/group/billing/message/cancel", "/topic/orders/group/billing/message/run-now",
		"/topic/orders/group/billing/message/reschedule", "/topic/mail/group/sender/message/requeue",
	} {
		res := do(t, http.MethodPost, srv.URL+u, url.Values{"ref": {ref}, "after": {"1m"}})
		assert.Equal(t, http.StatusForbidden, res.status, u)
		assert.Contains(t, res.body, "read-only", u)
	}
	st := q.stats("orders", "billing")
	assert.Equal(t, int64(1), st.Scheduled)
	assert.False(t, st.Paused)
	assert.Equal(t, int64(1), q.stats("mail", "sender").DeadLetters)
}

func TestAuthorizeDecidesWhoMayAct(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "m", 1, time.Hour)
	srv := q.serve(dashboard.Options{AllowActions: true, Authorize: func(r *http.Request) bool {
		return r.Header.Get("X-Operator") == "yes"
	}})
	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref
	page := srv.URL + "/topic/orders/group/billing/message?ref=" + url.QueryEscape(ref)
	cancel := srv.URL + "/topic/orders/group/billing/message/cancel"

	assert.NotContains(t, get(t, page).body, `method="post"`, "a visitor Authorize refuses sees no actions")
	refused := do(t, http.MethodPost, cancel, url.Values{"ref": {ref}})
	assert.Equal(t, http.StatusForbidden, refused.status)
	assert.Contains(t, refused.body, "not authorized")
	assert.Equal(t, int64(1), q.stats("orders", "billing").Scheduled)

	req, err := http.NewRequest(http.MethodPost, cancel, strings.NewReader(url.Values{"ref": {ref}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Operator", "yes")
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusSeeOther, res.StatusCode)
	assert.Zero(t, q.stats("orders", "billing").Scheduled)
	assert.Equal(t, int64(1), q.stats("orders", "shipping").Scheduled, "Cancel by ref acts in one group")
}

func TestActionsChangeTheQueueAndReportTheOutcome(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "m", 3, time.Hour)
	q.deadLetters("mail", "sender", 2)
	srv := q.serve(dashboard.Options{AllowActions: true})
	base := srv.URL + "/topic/orders/group/billing"
	ctx := context.Background()

	// Pause and resume.
	res := do(t, http.MethodPost, base+"/pause", nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.True(t, q.stats("orders", "billing").Paused)
	page := get(t, srv.URL+res.location)
	assert.Contains(t, page.body, "The group is paused")
	assert.Contains(t, page.body, `data-action="resume"`)
	require.Equal(t, http.StatusSeeOther, do(t, http.MethodPost, base+"/resume", nil).status)
	assert.False(t, q.stats("orders", "billing").Paused)

	// Run now: the page's own form, ref in its URL.
	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref
	page = get(t, base+"/message?ref="+url.QueryEscape(ref))
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/run-now"), url.Values{"state": {"scheduled"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	page = get(t, srv.URL+res.location)
	assert.Contains(t, page.body, "The message is due now.")
	assert.Contains(t, page.body, `id="state">due</span>`)
	assert.Equal(t, int64(1), q.stats("orders", "billing").Due)

	// Reschedule, by a delay and by a time.
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/reschedule"), url.Values{"after": {"2h"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	m, err := q.in.Message(ctx, "orders", redisdelay.ByRef("billing", ref))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), m.DueAt, time.Minute)
	at := time.Now().Add(72 * time.Hour).UTC().Truncate(time.Second)
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/reschedule"), url.Values{"at": {at.Format("2006-01-02T15:04:05")}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	m, err = q.in.Message(ctx, "orders", redisdelay.ByRef("billing", ref))
	require.NoError(t, err)
	assert.True(t, at.Equal(m.DueAt), "due at %s, want %s", m.DueAt, at)
	bad := do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/reschedule"), url.Values{"after": {"soon"}})
	assert.Equal(t, http.StatusBadRequest, bad.status)
	assert.Contains(t, bad.body, "soon")

	// Cancel, then cancel again: the group no longer holds it.
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/cancel"), url.Values{"state": {"due"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.Contains(t, res.location, "state=due")
	assert.Contains(t, get(t, srv.URL+res.location).body, "The message was cancelled.")
	_, err = q.in.Message(ctx, "orders", redisdelay.ByRef("billing", ref))
	assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	assert.Equal(t, int64(2), q.stats("orders", "billing").Scheduled)
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/cancel"), nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.Contains(t, get(t, srv.URL+res.location).body, "no longer held the message")
	assert.Equal(t, http.StatusNotFound, get(t, srv.URL+"/topic/orders/group/billing/message?ref="+url.QueryEscape(ref)).status)

	// Requeue a dead letter from its page, reached from the dead-letter tab.
	dead := get(t, srv.URL+"/topic/mail/group/sender?state=dead-lettered")
	msgLinks := links(dead.body, "/message?")
	require.Len(t, msgLinks, 2)
	deadPage := get(t, srv.URL+msgLinks[0])
	require.Equal(t, http.StatusOK, deadPage.status, deadPage.body)
	assert.Contains(t, deadPage.body, `id="state">dead letter</span>`)
	assert.Contains(t, deadPage.body, `data-action="requeue"`)
	assert.NotContains(t, deadPage.body, `data-action="cancel"`)
	assert.Contains(t, payloadOf(t, deadPage.body), "dead ")
	res = do(t, http.MethodPost, srv.URL+link(t, deadPage.body, "/message/requeue"), url.Values{"state": {"dead-lettered"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.Contains(t, get(t, srv.URL+res.location).body, "The dead letter was requeued")
	assert.Equal(t, int64(1), q.stats("mail", "sender").DeadLetters)
}
