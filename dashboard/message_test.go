package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
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
