package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// bars returns the counts of the forecast chart's bars, in order.
func bars(t *testing.T, body string) []string {
	t.Helper()
	require.Contains(t, body, `<svg class="forecast" id="forecast-chart"`)
	var out []string
	for _, m := range regexp.MustCompile(`<rect class="bar[^"]*" data-count="(\d+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// publishIn publishes n messages on topic due after d.
func (q *queue) publishIn(topic string, n int, d time.Duration) {
	for range n {
		msg := message.NewMessage("", []byte("later"))
		delay.Message(msg, delay.For(d))
		require.NoError(q.t, q.pub.Publish(topic, msg))
	}
}

func TestGroupPageForecastsHowManyMessagesComeDueInEachSpan(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publishIn("orders", 3, 2*time.Minute)
	q.publishIn("orders", 1, 32*time.Minute)
	q.publishIn("orders", 2, 5*time.Hour+30*time.Minute)
	q.publish("orders", "now", 1, 0)
	srv := q.serve(dashboard.Options{})

	res := get(t, srv.URL+"/topic/orders/group/billing")
	require.Equal(t, http.StatusOK, res.status, res.body)
	want := make([]string, 24)
	for k := range want {
		want[k] = "0"
	}
	want[0], want[6] = "3", "1"
	assert.Equal(t, want, bars(t, res.body), "24 bars of 5 minutes")
	assert.Contains(t, res.body, `<rect class="bar peak" data-count="3"`)
	assert.Contains(t, res.body, `1 due already · 2 due after <time`)
	assert.NotContains(t, res.body, "style=")

	day := get(t, srv.URL+link(t, res.body, "forecast=day"))
	require.Equal(t, http.StatusOK, day.status, day.body)
	want = make([]string, 24)
	for k := range want {
		want[k] = "0"
	}
	want[0], want[5] = "4", "2"
	assert.Equal(t, want, bars(t, day.body), "24 bars of an hour")
	assert.Contains(t, day.body, `class="active" aria-current="true">next 24 hours`)
	assert.Contains(t, link(t, day.body, "state=due"), "forecast=day", "the tabs keep the span")
}

func TestParkedMessagesOfATopicWithNoGroupAreCountedAndListed(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publish("signups", "now", 2, 0)
	q.publishIn("signups", 1, 62*time.Minute)
	srv := q.serve(dashboard.Options{AllowActions: true})

	overview := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, overview.status, overview.body)
	assert.Equal(t, "2", cell(t, overview.body, "signups", "", "due"))
	assert.Equal(t, "1", cell(t, overview.body, "signups", "", "scheduled"))
	assert.Equal(t, "waits for a first group", cell(t, overview.body, "signups", "", "paused"))
	parked := link(t, overview.body, "/parked")
	assert.Equal(t, "/topic/signups/parked", parked)

	page := get(t, srv.URL+parked+"?state=due")
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, "parked messages")
	assert.Contains(t, page.body, "they wait, parked, for the first group")
	assert.Contains(t, page.body, `Due now <span class="count">2</span>`)
	assert.NotContains(t, page.body, "In flight")
	assert.NotContains(t, page.body, `method="post"`, "nothing to act on")
	assert.Len(t, regexp.MustCompile(`<tr data-id=`).FindAllString(page.body, -1), 2)
	assert.Equal(t, "1", bars(t, page.body)[12], "the one due in an hour")

	msg := get(t, srv.URL+links(page.body, "/parked/message?")[0])
	require.Equal(t, http.StatusOK, msg.status, msg.body)
	assert.Equal(t, "now 0", payloadOf(t, msg.body))
	assert.NotContains(t, msg.body, `method="post"`)

	assert.Equal(t, http.StatusNotFound, get(t, srv.URL+"/topic/orders/parked").status, "a topic with a group parks nothing")
	assert.Equal(t, http.StatusBadRequest, get(t, srv.URL+parked+"?state=in-flight").status)

	// The first group to subscribe takes them: the topic has no parked row any more.
	q.register("signups", "welcome")
	assert.Equal(t, int64(2), q.stats("signups", "welcome").Due)
	overview = get(t, srv.URL+"/")
	assert.NotContains(t, overview.body, `data-topic="signups" data-group=""`)
	_, err := q.in.Forecast(context.Background(), "signups", redisdelay.ParkedGroup, time.Minute, 1)
	assert.ErrorIs(t, err, redisdelay.ErrNotFound)
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

// The Scheduled tab says how many of its messages wait in the compact tier (due more than the
// publisher's compact horizon, 1 h by default, ahead).
func TestGroupPageSaysHowManyScheduledMessagesWaitInTheCompactTier(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	q.publishIn("orders", 1, 2*time.Minute)
	q.publishIn("orders", 2, 5*time.Hour)
	srv := q.serve(dashboard.Options{})

	res := get(t, srv.URL+"/topic/orders/group/billing?state=scheduled")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Contains(t, res.body, `<p class="muted" id="compact">2 of them in compact tier`)
	assert.Equal(t, 3, strings.Count(res.body, "<tr data-id="), "every scheduled message listed")
	res = get(t, srv.URL+"/topic/orders/group/billing?state=due")
	assert.NotContains(t, res.body, `id="compact"`)
}
