package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/dashboard"
)

// level returns the data-level of one stat of one group's row of the overview ("" for none),
// and that of the row.
func level(t *testing.T, body, topic, group, stat string) (cellLevel, rowLevel string) {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-topic="` + regexp.QuoteMeta(topic) + `" data-group="` + regexp.QuoteMeta(group) +
		`"(?: class="row-\w+" data-level="(\w+)")?>(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, row, "no row for group %s on topic %s", group, topic)
	m := regexp.MustCompile(`<td class="[^"]*"(?: data-level="(\w+)")? data-stat="` + stat + `">`).FindStringSubmatch(row[2])
	require.NotNil(t, m, "no %s cell", stat)
	return m[1], row[1]
}

func TestOverviewColoursOverdueDeadLettersAndPausedGroupsByTheThresholds(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing", "shipping")
	q.publish("orders", "now", 2, 0)
	q.deadLetters("emails", "sender", 2)
	q.deadLetters("sms", "sender", 1)
	require.NoError(t, q.in.Pause(context.Background(), "sms", "sender"))
	require.Positive(t, q.stats("orders", "billing").OldestDueAge)

	// The defaults: due messages that waited microseconds are fine; any dead letter and a
	// paused group are warnings.
	res := get(t, q.serve(dashboard.Options{}).URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	for _, c := range []struct{ topic, group, stat, cell, row string }{
		{"orders", "billing", "oldest-due", "", ""},
		{"orders", "shipping", "dead", "", ""},
		{"emails", "sender", "dead", "warn", "warn"},
		{"sms", "sender", "dead", "warn", "warn"},
		{"sms", "sender", "paused", "warn", "warn"},
	} {
		cell, row := level(t, res.body, c.topic, c.group, c.stat)
		assert.Equal(t, c.cell, cell, "%s/%s %s", c.topic, c.group, c.stat)
		assert.Equal(t, c.row, row, "%s/%s row", c.topic, c.group)
	}
	assert.Contains(t, res.body, `<span class="warn">amber</span> from 30s`, "the legend gives the thresholds")

	// The application's own: an alarm from 2 dead letters, a warning from 1 µs overdue, paused
	// groups as alarms; and a negative threshold turns its colour off.
	res = get(t, q.serve(dashboard.Options{Thresholds: dashboard.Thresholds{
		OverdueWarning: time.Microsecond, OverdueAlarm: time.Hour,
		DeadLettersWarning: -1, DeadLettersAlarm: 2, PausedAlarm: true,
	}}).URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	for _, c := range []struct{ topic, group, stat, cell, row string }{
		{"orders", "billing", "oldest-due", "warn", "warn"},
		{"orders", "shipping", "oldest-due", "warn", "warn"},
		{"orders", "billing", "scheduled", "", "warn"},
		{"emails", "sender", "dead", "alarm", "alarm"},
		{"sms", "sender", "dead", "", "alarm"},
		{"sms", "sender", "paused", "alarm", "alarm"},
	} {
		cell, row := level(t, res.body, c.topic, c.group, c.stat)
		assert.Equal(t, c.cell, cell, "%s/%s %s", c.topic, c.group, c.stat)
		assert.Equal(t, c.row, row, "%s/%s row", c.topic, c.group)
	}
}

func TestGroupPageColoursItsTabsAndSaysWhatNeedsAttention(t *testing.T) {
	q := newQueue(t)
	q.deadLetters("emails", "sender", 3)
	require.NoError(t, q.in.Pause(context.Background(), "emails", "sender")) // its consumer claims no more
	q.publish("emails", "now", 1, 0)
	srv := q.serve(dashboard.Options{Thresholds: dashboard.Thresholds{OverdueWarning: time.Microsecond, DeadLettersAlarm: 3}})

	res := get(t, srv.URL+"/topic/emails/group/sender")
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Contains(t, res.body, `Dead letters <span class="count alarm" data-level="alarm">3</span>`)
	assert.Contains(t, res.body, `Due now <span class="count warn" data-level="warn">1</span>`)
	assert.Contains(t, res.body, `Scheduled <span class="count">0</span>`)
	assert.Regexp(t, `id="overdue" data-level="warn">1 due now; the oldest has waited [0-9.]+[µm]?s for a consumer.`, res.body)
	assert.Contains(t, res.body, `id="dead-letters" data-level="alarm">3 dead letters wait on <code>emails.dead-letter.sender</code>.`)
	assert.Contains(t, res.body, `id="paused" data-level="warn">paused</span>`)
	assert.Contains(t, res.body, `<p class="means" id="means">Due later: they wait for their due time.</p>`)
}
