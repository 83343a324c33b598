package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/metrics"
)

// commandCounter counts the commands a client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countedInspector returns an Inspector of q's Redis whose commands are counted.
func (q *queue) countedInspector(t *testing.T) (*redisdelay.Inspector, *commandCounter) {
	client := q.srv.Client(t)
	counter := &commandCounter{}
	client.AddHook(counter)
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	return in, counter
}

// doAs sends a request with Host host, and Origin http://host for a POST, as a browser on a
// page of that host would.
func doAs(t *testing.T, host, method, u string) response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	req.Host = host
	if method == http.MethodPost {
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b.String()}
}

func TestRequestsForAnotherHostAreRefusedBeforeAnyRedisRead(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publish("orders", "m", 1, time.Hour)
	in, counter := q.countedInspector(t)
	h, err := dashboard.New(in, dashboard.Options{AllowActions: true, AllowedHosts: []string{"Queues.Internal", "10.0.0.5"}})
	require.NoError(t, err)
	srv := serveHandler(t, h)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv, "http://"))
	require.NoError(t, err)
	ref := q.first("orders", "billing", redisdelay.StateScheduled).Ref

	paths := []string{"/", "/topic/orders/group/billing", "/topic/orders/group/billing/message?ref=" + url.QueryEscape(ref), "/static/dashboard.css"}
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "127.0.0.1.evil.example", "10.0.0.6:" + port, "[::2]:" + port} {
		for _, p := range paths {
			res := doAs(t, host, http.MethodGet, srv+p)
			assert.Equal(t, http.StatusMisdirectedRequest, res.status, "%s %s", host, p)
			assert.NotContains(t, res.body, "billing", "%s %s", host, p)
		}
		res := doAs(t, host, http.MethodPost, srv+"/topic/orders/group/billing/pause")
		assert.Equal(t, http.StatusMisdirectedRequest, res.status, host)
	}
	assert.Zero(t, counter.n.Load(), "no Redis command for a refused host")
	assert.False(t, q.stats("orders", "billing").Paused)

	for _, host := range []string{"localhost:" + port, "LOCALHOST", "app.localhost:" + port, "127.0.0.1:" + port, "127.3.4.5", "[::1]:" + port, "queues.internal:" + port, "QUEUES.INTERNAL.", "10.0.0.5:443"} {
		res := doAs(t, host, http.MethodGet, srv+"/topic/orders/group/billing")
		assert.Equal(t, http.StatusOK, res.status, host)
	}
	assert.Equal(t, http.StatusSeeOther, doAs(t, "queues.internal:"+port, http.MethodPost, srv+"/topic/orders/group/billing/pause").status)
	assert.True(t, q.stats("orders", "billing").Paused)

	any, err := dashboard.New(in, dashboard.Options{AllowedHosts: []string{"*"}})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, doAs(t, "evil.example:"+port, http.MethodGet, serveHandler(t, any)+"/").status, `"*" allows every host`)
}

// serveHandler serves h for the test and returns its URL.
func serveHandler(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestAuthenticateCanChallengeBeforeAnyPageOrFile(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	in, counter := q.countedInspector(t)
	h, err := dashboard.New(in, dashboard.Options{Authenticate: func(w http.ResponseWriter, r *http.Request) bool {
		switch user, _, ok := r.BasicAuth(); {
		case ok && user == "operator":
			return true
		case ok && user == "silent":
			return false // writes nothing: the dashboard answers 403
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="queues"`)
		http.Error(w, "who are you?", http.StatusUnauthorized)
		return false
	}})
	require.NoError(t, err)
	srv := serveHandler(t, h)

	for _, p := range []string{"/", "/topic/orders/group/billing", "/static/htmx.min.js", "/no/such/page"} {
		res := get(t, srv+p)
		assert.Equal(t, http.StatusUnauthorized, res.status, p)
		assert.Equal(t, `Basic realm="queues"`, res.header.Get("Www-Authenticate"), p)
		assert.Equal(t, dashboard.ContentSecurityPolicy, res.header.Get("Content-Security-Policy"), p)
	}
	assert.Zero(t, counter.n.Load(), "no Redis command before authentication")

	withUser := func(user, p string) int {
		req, err := http.NewRequest(http.MethodGet, srv+p, nil)
		require.NoError(t, err)
		req.SetBasicAuth(user, "secret")
		res, err := noRedirects.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, withUser("silent", "/"))
	assert.Equal(t, http.StatusOK, withUser("operator", "/"))
	assert.Equal(t, http.StatusOK, withUser("operator", "/topic/orders/group/billing"))
	assert.Equal(t, http.StatusOK, withUser("operator", "/static/htmx.min.js"))
}

func TestStaticDirectoriesAreNotListed(t *testing.T) {
	q := newQueue(t)
	srv := q.serve(dashboard.Options{Prefix: "/queues"})
	for _, p := range []string{"/queues/static/", "/queues/static", "/queues/static/.", "/queues/static/missing/", "/queues/static/../static/"} {
		res, err := http.Get(srv.URL + p) // following redirects
		require.NoError(t, err)
		var body bytes.Buffer
		_, _ = body.ReadFrom(res.Body)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusNotFound, res.StatusCode, p)
		assert.NotContains(t, body.String(), "htmx.min.js", p)
	}
	assert.Equal(t, http.StatusOK, get(t, srv.URL+"/queues/static/dashboard.css").status)
}

func TestHtmxKeepsNoSnapshotsOfPages(t *testing.T) {
	q := newQueue(t)
	srv := q.serve(dashboard.Options{})
	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status)
	m := regexp.MustCompile(`<meta name="htmx-config" content='([^']*)'>`).FindStringSubmatch(res.body)
	require.NotNil(t, m, "no htmx config")
	var config map[string]any
	require.NoError(t, json.Unmarshal([]byte(html.UnescapeString(m[1])), &config))
	assert.Equal(t, 0.0, config["historyCacheSize"], "htmx keeps no page, payloads included, in sessionStorage")
	assert.Equal(t, "no-store", res.header.Get("Cache-Control"))
}

func TestViewingPagesCreatesNoMetricSeries(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.register("emails", "sender")
	q.publish("orders", "m", 2, 0)
	registry := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: registry})
	require.NoError(t, err)
	srv := q.serve(dashboard.Options{Lateness: m})
	for range 3 {
		for _, p := range []string{"/", "/topic/orders/group/billing", "/topic/emails/group/sender?state=due"} {
			require.Equal(t, http.StatusOK, get(t, srv.URL+p).status, p)
		}
	}
	families, err := registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.NotEqual(t, "topic", l.GetName(), "a series of %s", f.GetName())
			}
		}
	}
}

func TestErrorPagesSayWhatFailedAndLogTheRedisError(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publish("orders", "m", 1, time.Hour)
	var logged bytes.Buffer
	srv := q.serve(dashboard.Options{ErrorLog: log.New(&logged, "", 0)})
	// A due set that is not a sorted set makes the stats script fail inside Redis.
	client := q.srv.Client(t)
	ctx := context.Background()
	keys, err := client.Keys(ctx, "*billing:due").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.NoError(t, client.Del(ctx, keys[0]).Err())
	require.NoError(t, client.Set(ctx, keys[0], "not a sorted set", 0).Err())

	for _, p := range []string{"/", "/topic/orders/group/billing"} {
		logged.Reset()
		res := get(t, srv.URL+p)
		require.Equal(t, http.StatusInternalServerError, res.status, p)
		problem := regexp.MustCompile(`(?s)<p class="problem" id="problem">(.*?)</p>`).FindStringSubmatch(res.body)
		require.NotNil(t, problem, res.body)
		assert.Contains(t, problem[1], "Reading or changing the queue failed", p)
		for _, internal := range []string{"WRONGTYPE", "script", "user_script", "f_", keys[0]} {
			assert.NotContains(t, problem[1], internal, p)
		}
		id := regexp.MustCompile(`under id ([0-9a-f]+)`).FindStringSubmatch(problem[1])
		require.NotNil(t, id, problem[1])
		assert.Contains(t, logged.String(), "error "+id[1]+": ", p)
		assert.Contains(t, logged.String(), "WRONGTYPE", "the log has the whole error")
	}
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
