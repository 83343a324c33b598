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
	"github.com/redis/go-redis/v9"
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
	t      testing.TB
	srv    *redistest.Server
	client redis.UniversalClient // the publisher's and the inspector's
	pub    *redisdelay.Publisher
	in     *redisdelay.Inspector
}

func newQueue(t testing.TB) *queue {
	srv := redistest.Start(t, redistest.Options{})
	client := srv.Client(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	return &queue{t: t, srv: srv, client: client, pub: pub, in: in}
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
	return q.serveHandler(h)
}

// serveHandler serves h for the test.
func (q *queue) serveHandler(h http.Handler) *httptest.Server {
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
