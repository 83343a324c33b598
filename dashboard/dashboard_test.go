package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestMain says how many tests were skipped for want of redis-server.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.ReportSkips()
	os.Exit(code)
}

// queue is a throw-away redis-server with a publisher and an inspector on it.
type queue struct {
	t   testing.TB
	srv *redistest.Server
	pub *redisdelay.Publisher
	in  *redisdelay.Inspector
}

func newQueue(t testing.TB) *queue {
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	return &queue{t: t, srv: srv, pub: pub, in: in}
}

// subscriber returns a Subscriber of group, closed when the test ends.
func (q *queue) subscriber(group string, maxAttempts int) *redisdelay.Subscriber {
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: q.srv.Client(q.t), ConsumerGroup: group, MaxAttempts: maxAttempts,
		NackBackoff: redisdelay.ConstantBackoff(0),
	}, nil)
	require.NoError(q.t, err)
	q.t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// register registers groups on topic.
func (q *queue) register(topic string, groups ...string) {
	for _, g := range groups {
		require.NoError(q.t, q.subscriber(g, 0).SubscribeInitialize(topic))
	}
}

// publish publishes n messages with payload "<prefix> <i>", the i-th due after d+i ms (so
// that their order is known), or at once when d is 0.
func (q *queue) publish(topic, prefix string, n int, d time.Duration) {
	var msgs []*message.Message
	for i := range n {
		msg := message.NewMessage(fmt.Sprintf("%s-%03d", prefix, i), []byte(prefix+" "+strconv.Itoa(i)))
		if d > 0 {
			delay.Message(msg, delay.For(d+time.Duration(i)*time.Millisecond))
		}
		msgs = append(msgs, msg)
	}
	require.NoError(q.t, q.pub.Publish(topic, msgs...))
}

// deadLetters makes n messages of topic dead letters of group, which must have no other
// messages: a subscriber with one attempt nacks each.
func (q *queue) deadLetters(topic, group string, n int) {
	ch, err := q.subscriber(group, 1).Subscribe(context.Background(), topic)
	require.NoError(q.t, err)
	q.publish(topic, "dead", n, 0)
	for range n {
		select {
		case msg := <-ch:
			msg.Nack()
		case <-time.After(10 * time.Second):
			q.t.Fatalf("no message to nack on topic %s", topic)
		}
	}
	require.Eventually(q.t, func() bool { return q.stats(topic, group).DeadLetters == int64(n) }, 10*time.Second, 10*time.Millisecond)
}

func (q *queue) stats(topic, group string) redisdelay.GroupStats {
	all, err := q.in.Stats(context.Background(), topic)
	require.NoError(q.t, err)
	for _, st := range all {
		if st.Group == group {
			return st
		}
	}
	q.t.Fatalf("no group %s on topic %s", group, topic)
	return redisdelay.GroupStats{}
}

// first returns the first message of group on topic in state.
func (q *queue) first(topic, group string, state redisdelay.State) redisdelay.MessageInfo {
	page, err := q.in.List(context.Background(), topic, group, redisdelay.ListOptions{State: state, Limit: 1})
	require.NoError(q.t, err)
	require.NotEmpty(q.t, page.Messages, "no %s message in group %s on topic %s", state, group, topic)
	return page.Messages[0]
}

// serve starts the dashboard for the test.
func (q *queue) serve(opts dashboard.Options) *httptest.Server {
	h, err := dashboard.New(q.in, opts)
	require.NoError(q.t, err)
	srv := httptest.NewServer(h)
	q.t.Cleanup(srv.Close)
	return srv
}

// response is a response with its body read.
type response struct {
	status   int
	header   http.Header
	body     string
	location string
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t testing.TB, method, u string, form url.Values) response {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: string(b), location: res.Header.Get("Location")}
}

func get(t testing.TB, u string) response { return do(t, http.MethodGet, u, nil) }

// cell returns the text of one stat of one group's row of the overview.
func cell(t *testing.T, body, topic, group, stat string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-topic="` + regexp.QuoteMeta(html.EscapeString(topic)) + `" data-group="` +
		regexp.QuoteMeta(html.EscapeString(group)) + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, row, "no row for group %s on topic %s", group, topic)
	m := regexp.MustCompile(`data-stat="` + stat + `">(.*?)</td>`).FindStringSubmatch(row[1])
	require.NotNil(t, m, "no %s cell", stat)
	return html.UnescapeString(m[1])
}

var hrefRE = regexp.MustCompile(`(?:href|action)="([^"]*)"`)

// links returns every href and form action of a page, unescaped, that contains part.
func links(body, part string) []string {
	var out []string
	for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
		if u := html.UnescapeString(m[1]); strings.Contains(u, part) {
			out = append(out, u)
		}
	}
	return out
}

// link returns the only link of a page that contains part.
func link(t *testing.T, body, part string) string {
	t.Helper()
	l := links(body, part)
	require.Len(t, l, 1, "links containing %q", part)
	return l[0]
}

// payloadOf returns the text of the message page's payload block.
func payloadOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<pre class="payload" id="payload">(.*?)</pre>`).FindStringSubmatch(body)
	require.NotNil(t, m, "no payload on the page")
	return html.UnescapeString(m[1])
}

func TestOverviewShowsTheStatsAndLatenessOfEveryGroup(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "later", 3, time.Hour)
	q.publish("orders", "now", 2, 0)
	q.deadLetters("emails", "sender", 2)
	q.publish("emails", "later", 1, time.Minute)
	require.NoError(t, q.in.Pause(context.Background(), "emails", "sender"))

	srv := q.serve(dashboard.Options{Lateness: func(topic, group string) (time.Duration, time.Duration, bool) {
		return 12 * time.Millisecond, 340 * time.Millisecond, topic == "orders" && group == "billing"
	}})
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

func TestGroupPagePagesThroughEveryMessageWithItsCursor(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publish("orders", "m", 120, time.Hour)
	srv := q.serve(dashboard.Options{})

	res := get(t, srv.URL+"/topic/orders/group/billing")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Regexp(t, `class="active" aria-current="page">Scheduled <span class="count">120</span>`, res.body)
	idRE := regexp.MustCompile(`<tr data-id="([0-9a-f]{12})">`)
	seen := map[string]bool{}
	var order []string
	pages := 0
	for {
		pages++
		require.Equal(t, http.StatusOK, res.status, res.body)
		rows := idRE.FindAllStringSubmatch(res.body, -1)
		assert.LessOrEqual(t, len(rows), 50, "page %d", pages)
		for _, r := range rows {
			assert.False(t, seen[r[1]], "%s listed twice", r[1])
			seen[r[1]] = true
			order = append(order, r[1])
		}
		next := links(res.body, "cursor=")
		if !strings.Contains(res.body, `rel="next"`) {
			break
		}
		require.NotEmpty(t, next)
		u := next[len(next)-1]
		assert.Contains(t, u, "state=scheduled")
		res = get(t, srv.URL+u)
		require.Less(t, pages, 10, "pagination does not end")
	}
	assert.Equal(t, 3, pages)
	assert.Len(t, seen, 120)
	assert.IsIncreasing(t, order, "IDs sort in publish order, which is due-time order here")
	assert.Contains(t, res.body, ">First page</a>")
}

func TestGroupPageFindsAMessageByExactRefOrKey(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	require.NoError(t, q.pub.Publish("orders", redisdelay.WithKey(message.NewMessage("uuid-7", []byte("order seven")), "order/7")))
	srv := q.serve(dashboard.Options{})

	page := get(t, srv.URL+"/topic/orders/group/billing")
	search := regexp.MustCompile(`<form class="search" method="get" action="([^"]+)"`).FindStringSubmatch(page.body)
	require.NotNil(t, search)
	byKey := get(t, srv.URL+html.UnescapeString(search[1])+"?q="+url.QueryEscape("order/7"))
	require.Equal(t, http.StatusOK, byKey.status, byKey.body)
	assert.Equal(t, "order seven", payloadOf(t, byKey.body))

	ref := q.first("orders", "billing", redisdelay.StateDue).Ref
	byRef := get(t, srv.URL+html.UnescapeString(search[1])+"?q="+url.QueryEscape(ref))
	require.Equal(t, http.StatusOK, byRef.status, byRef.body)
	assert.Contains(t, byRef.body, "<code>uuid-7</code>")

	missing := get(t, srv.URL+html.UnescapeString(search[1])+"?q=no-such-key")
	assert.Equal(t, http.StatusNotFound, missing.status)
	assert.Contains(t, missing.body, "no-such-key")
}

func TestMessagePageShowsTheWholePayloadPrettyPrintedAndEscaped(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	payload := `{"order":7,"note":"<script>alert(1)</script>","items":["a long item name","another long item name"]}`
	msg := message.NewMessage("uuid-json", []byte(payload))
	msg.Metadata.Set("trace_id", "abc-123")
	delay.Message(msg, delay.For(time.Hour))
	require.NoError(t, q.pub.Publish("orders", msg))
	require.NoError(t, q.pub.Publish("orders", message.NewMessage("uuid-text", []byte("plain <b>text</b>"))))
	srv := q.serve(dashboard.Options{})

	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref
	res := get(t, srv.URL+"/topic/orders/group/billing/message?ref="+url.QueryEscape(ref))
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Equal(t, "{\n  \"order\": 7,\n  \"note\": \"<script>alert(1)</script>\",\n  \"items\": [\n    \"a long item name\",\n    \"another long item name\"\n  ]\n}", payloadOf(t, res.body))
	assert.NotContains(t, res.body, "<script>alert")
	assert.Contains(t, res.body, `<span class="muted" id="payload-kind">JSON</span>`)
	assert.Contains(t, res.body, "<code>trace_id</code></td><td><code>abc-123</code>")
	assert.Contains(t, res.body, `<span class="badge" id="state">scheduled</span>`)
	assert.Contains(t, res.body, `<dd id="attempt">0</dd>`)
	assert.Regexp(t, `<dd id="due-at"><time datetime="[0-9T:.-]+Z">`, res.body)

	text := get(t, srv.URL+"/topic/orders/group/billing/message?ref="+url.QueryEscape(q.first("orders", "billing", redisdelay.StateDue).Ref))
	require.Equal(t, http.StatusOK, text.status, text.body)
	assert.Equal(t, "plain <b>text</b>", payloadOf(t, text.body))
	assert.Contains(t, text.body, "plain &lt;b&gt;text&lt;/b&gt;")
	assert.Contains(t, text.body, `id="payload-kind">text</span>`)
}

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
	assert.Equal(t, int64(1), q.stats("orders", "shipping").Scheduled, "CancelRef acts on one group")
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
	m, err := q.in.Message(ctx, "orders", "billing", ref)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), m.DueAt, time.Minute)
	at := time.Now().Add(72 * time.Hour).UTC().Truncate(time.Second)
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/message/reschedule"), url.Values{"at": {at.Format("2006-01-02T15:04:05")}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	m, err = q.in.Message(ctx, "orders", "billing", ref)
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
	_, err = q.in.Message(ctx, "orders", "billing", ref)
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

func TestEveryResponseCarriesTheSecurityHeadersAndNoInlineCode(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "m", 1, time.Hour)
	srv := q.serve(dashboard.Options{AllowActions: true, Prefix: "/queues"})
	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref

	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>[^<]|<script>|\sstyle=|\son[a-z]+=|<style`)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/queues/", 200},
		{"GET", "/queues/topic/orders/group/billing", 200},
		{"GET", "/queues/topic/orders/group/billing/message?ref=" + url.QueryEscape(ref), 200},
		{"GET", "/queues/static/dashboard.css", 200},
		{"GET", "/queues/static/htmx.min.js", 200},
		{"GET", "/queues/topic/orders/group/nobody", 404},
		{"GET", "/queues/no/such/page", 404},
		{"POST", "/queues/topic/orders/group/billing/message/cancel", 400},
	} {
		res := do(t, c.method, srv.URL+c.path, nil)
		assert.Equal(t, c.status, res.status, c.path)
		assert.Equal(t, dashboard.ContentSecurityPolicy, res.header.Get("Content-Security-Policy"), c.path)
		assert.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"), c.path)
		if strings.HasPrefix(res.header.Get("Content-Type"), "text/html") {
			assert.NotRegexp(t, inline, res.body, c.path)
			assert.NotContains(t, res.body, "//", "nothing is loaded from another host: "+c.path)
			assert.Contains(t, res.body, `<script src="/queues/static/htmx.min.js" defer></script>`, c.path)
			assert.Contains(t, res.body, `{"includeIndicatorStyles":false`, c.path)
		}
	}
	assert.Equal(t, "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'", dashboard.ContentSecurityPolicy)
	js := get(t, srv.URL+"/queues/static/htmx.min.js")
	assert.Contains(t, js.header.Get("Content-Type"), "javascript")
	assert.True(t, strings.HasPrefix(js.body, "/*! htmx.org 2."), "htmx keeps its license header")
	assert.Contains(t, get(t, srv.URL+"/queues/static/dashboard.css").header.Get("Content-Type"), "text/css")

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/queues/topic/orders/group/billing/pause", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode, "a cross-site POST is refused")
	assert.False(t, q.stats("orders", "billing").Paused)
}

func TestNamesWithSpacesSlashesAndUnicodeRoundTripThroughLinks(t *testing.T) {
	q := newQueue(t)
	topic, group := "orders/eu west/ünïcødé ✓ %2F?#&", "billing/α β+1 ✓"
	q.register(topic, group, "other")
	require.NoError(t, q.pub.Publish(topic, redisdelay.WithKey(message.NewMessage("uuid-1", []byte(`{"ok":true}`)), "key with spaces/ü")))
	srv := q.serve(dashboard.Options{Prefix: "/queues", AllowActions: true})

	overview := get(t, srv.URL+"/queues/")
	require.Equal(t, http.StatusOK, overview.status, overview.body)
	groupURL := link(t, overview.body, "/group/billing")
	assert.Equal(t, "/queues/topic/"+url.PathEscape(topic)+"/group/"+url.PathEscape(group), groupURL)
	groupPage := get(t, srv.URL+groupURL+"?state=due")
	require.Equal(t, http.StatusOK, groupPage.status, groupPage.body)
	assert.Contains(t, html.UnescapeString(groupPage.body), "<h1><span class=\"muted\">Topic</span> "+topic+" <span class=\"muted\">· group</span> "+group+"</h1>")

	// The key and the UUID each link to the message.
	msgURLs := links(groupPage.body, "/message?")
	require.Len(t, msgURLs, 2)
	assert.Equal(t, msgURLs[0], msgURLs[1])
	msgURL := msgURLs[0]
	msgPage := get(t, srv.URL+msgURL)
	require.Equal(t, http.StatusOK, msgPage.status, msgPage.body)
	assert.Equal(t, "{\n  \"ok\": true\n}", payloadOf(t, msgPage.body))
	assert.Contains(t, msgPage.body, "<code>key with spaces/ü</code>")
	byKey := get(t, srv.URL+groupURL+"/message?key="+url.QueryEscape("key with spaces/ü"))
	assert.Equal(t, http.StatusOK, byKey.status, byKey.body)

	res := do(t, http.MethodPost, srv.URL+link(t, msgPage.body, "/message/cancel"), url.Values{"state": {"due"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	back := get(t, srv.URL+res.location)
	require.Equal(t, http.StatusOK, back.status, back.body)
	assert.Contains(t, back.body, "The message was cancelled.")
	assert.Zero(t, q.stats(topic, group).Due)
	assert.Equal(t, int64(1), q.stats(topic, "other").Due)
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

func TestErrorsSayWhatWentWrong(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	srv := q.serve(dashboard.Options{AllowActions: true})
	for _, c := range []struct {
		path   string
		status int
		names  string
	}{
		{"/topic/nothing/group/billing", http.StatusNotFound, "nothing"},
		{"/topic/orders/group/nobody", http.StatusNotFound, "nobody"},
		{"/topic/orders/group/billing/message?ref=0%2F000000ffffff", http.StatusNotFound, "000000ffffff"},
		{"/topic/orders/group/billing/message?key=gone", http.StatusNotFound, "gone"},
		{"/topic/orders/group/billing/message", http.StatusBadRequest, "ref, key or q"},
		{"/topic/orders/group/billing?state=sleeping", http.StatusBadRequest, "sleeping"},
		{"/topic/orders/group/billing?cursor=garbage", http.StatusBadRequest, "garbage"},
		{"/topic/%7Bbraces%7D/group/billing", http.StatusBadRequest, "braces"},
	} {
		res := get(t, srv.URL+c.path)
		assert.Equal(t, c.status, res.status, c.path)
		assert.Contains(t, res.body, c.names, c.path)
		assert.Contains(t, res.body, `<p class="problem" id="problem">`, c.path)
	}
	res := do(t, http.MethodPost, srv.URL+"/topic/orders/group/billing/message/reschedule", url.Values{"ref": {"0/000000ffffff"}})
	assert.Equal(t, http.StatusBadRequest, res.status)
	assert.Contains(t, res.body, "give a due time or a delay")
}

func TestNewRefusesAPrefixItCannotRoute(t *testing.T) {
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: redistest.Start(t, redistest.Options{}).Client(t)}, nil)
	require.NoError(t, err)
	for _, p := range []string{"queues", "/", "/queues/", "/a//b", "/a/../b", "/{x}", "/with space"} {
		_, err := dashboard.New(in, dashboard.Options{Prefix: p})
		assert.Error(t, err, p)
	}
	for _, p := range []string{"", "/queues", "/ops/queues-v2"} {
		_, err := dashboard.New(in, dashboard.Options{Prefix: p})
		assert.NoError(t, err, p)
	}
	_, err = dashboard.New(nil, dashboard.Options{})
	assert.Error(t, err)
}

func TestOverviewWithoutLatenessSaysHowToShowIt(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")

	res := get(t, q.serve(dashboard.Options{}).URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.NotContains(t, res.body, "Lateness p50")
	assert.NotContains(t, res.body, `data-stat="lateness-p50"`)
	assert.Contains(t, res.body, `id="lateness-note"`)
	assert.Contains(t, res.body, "dashboard.Options{Lateness: metrics.Lateness}")

	with := get(t, q.serve(dashboard.Options{Lateness: func(string, string) (time.Duration, time.Duration, bool) {
		return 0, 0, false
	}}).URL+"/")
	assert.Contains(t, with.body, "Lateness p50")
	assert.NotContains(t, with.body, `id="lateness-note"`)
}

func TestEveryPageNamesTheRedisAndKeyPrefixItReads(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	srv := q.serve(dashboard.Options{})
	for _, u := range []string{"/", "/topic/orders/group/billing", "/topic/nope/group/billing"} {
		res := get(t, srv.URL+u)
		assert.Contains(t, res.body, `<code id="redis-addr">`+q.srv.Addr+`</code>`, u)
		assert.Contains(t, res.body, `<code id="key-prefix">`+redisdelay.DefaultKeyPrefix+`</code>`, u)
	}
}

func TestOverviewAndGroupPagesRefreshThemselvesUntilPaused(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	srv := q.serve(dashboard.Options{Prefix: "/queues", RefreshInterval: 3 * time.Second})
	polling := regexp.MustCompile(`<div id="live" hx-get="([^"]*)" hx-trigger="every 3000ms" hx-select="#live, #problem" hx-target="this" hx-swap="outerHTML" hx-disinherit="\*">`)

	for _, u := range []string{"/queues/", "/queues/topic/orders/group/billing?state=due&done=pause"} {
		res := get(t, srv.URL+u)
		require.Equal(t, http.StatusOK, res.status, res.body)
		m := polling.FindStringSubmatch(res.body)
		require.NotNil(t, m, "%s polls", u)
		assert.NotContains(t, html.UnescapeString(m[1]), "done=", "a poll does not repeat the action's notice")
		assert.Regexp(t, `Updated <time datetime="[0-9T:-]+Z">\d\d:\d\d:\d\d UTC</time> · refreshes every 3s`, res.body)

		pause := link(t, res.body, "refresh=off")
		paused := get(t, srv.URL+pause)
		require.Equal(t, http.StatusOK, paused.status, paused.body)
		assert.NotContains(t, paused.body, "hx-trigger", "%s paused", u)
		assert.Contains(t, paused.body, "auto-refresh paused")
		resume := regexp.MustCompile(`<a href="([^"]*)" data-refresh="resume">`).FindStringSubmatch(paused.body)
		require.NotNil(t, resume, "%s paused has a resume link", u)
		assert.Equal(t, m[1], resume[1], "resuming goes back to the page it polls")
		assert.Regexp(t, polling, get(t, srv.URL+html.UnescapeString(resume[1])).body, "the resumed page polls again")
	}

	off := get(t, q.serve(dashboard.Options{RefreshInterval: -1}).URL+"/")
	assert.NotContains(t, off.body, "hx-trigger")
	assert.NotContains(t, off.body, "refresh=off")
	assert.Contains(t, off.body, "Updated <time")
}

func TestDeadLetterPageShowsTheWholeMessageWithItsReasonAttemptsAndTimeOfDeath(t *testing.T) {
	q := newQueue(t)
	ch, err := q.subscriber("sender", 2).Subscribe(context.Background(), "emails")
	require.NoError(t, err)
	payload := `{"to":"someone@example.com","body":"` + strings.Repeat("long text ", 40) + `"}`
	msg := message.NewMessage("bounced-1", []byte(payload))
	msg.Metadata.Set("trace_id", "t-42")
	before := time.Now()
	require.NoError(t, q.pub.Publish("emails", msg))
	for range 2 {
		select {
		case m := <-ch:
			m.Nack()
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery to nack")
		}
	}
	require.Eventually(t, func() bool { return q.stats("emails", "sender").DeadLetters == 1 }, 10*time.Second, 10*time.Millisecond)
	srv := q.serve(dashboard.Options{})

	tab := get(t, srv.URL+"/topic/emails/group/sender?state=dead-lettered")
	require.Equal(t, http.StatusOK, tab.status, tab.body)
	assert.Contains(t, tab.body, "<th>Died at</th><th class=\"num\">Attempts</th><th>Reason</th>")
	assert.Regexp(t, `<td class="num">2</td>\s*<td data-field="reason">nacked</td>`, tab.body)

	res := get(t, srv.URL+link(t, tab.body, "/message?"))
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Equal(t, `{
  "to": "someone@example.com",
  "body": "`+strings.Repeat("long text ", 40)+`"
}`, payloadOf(t, res.body), "the whole payload, not a preview")
	assert.Contains(t, res.body, `<dd id="attempt">2</dd>`)
	assert.Contains(t, res.body, `<dd id="reason">nacked</dd>`)
	died := regexp.MustCompile(`<dd id="died-at"><time datetime="([^"]+)">`).FindStringSubmatch(res.body)
	require.NotNil(t, died)
	at, err := time.Parse(time.RFC3339Nano, died[1])
	require.NoError(t, err)
	assert.WithinRange(t, at, before.Add(-time.Second), time.Now().Add(time.Second))
	assert.Contains(t, res.body, "<code>trace_id</code></td><td><code>t-42</code>")
	assert.Contains(t, res.body, "<code>"+redisdelay.DeadLetterReasonMetadataKey+"</code>")
	assert.NotContains(t, res.body, "first bytes of the payload")
}
