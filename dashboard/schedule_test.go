package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// scheduler returns a Scheduler on the queue's Redis, closed when the test ends.
func (q *queue) scheduler() *schedule.Scheduler {
	sch, err := schedule.New(schedule.Config{Publisher: q.pub}, nil)
	require.NoError(q.t, err)
	q.t.Cleanup(func() { _ = sch.Close() })
	return sch
}

// put stores schedules through sch.
func (q *queue) put(sch *schedule.Scheduler, schedules ...schedule.Schedule) {
	for _, s := range schedules {
		_, err := sch.Put(context.Background(), s)
		require.NoError(q.t, err)
	}
}

func (q *queue) schedule(name string) schedule.Info {
	info, err := schedule.Get(context.Background(), q.in, name)
	require.NoError(q.t, err)
	return info
}

// scheduleCell returns the text of one column of one schedule's row of the schedules page.
func scheduleCell(t *testing.T, body, name, stat string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(html.EscapeString(name)) + `">(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, row, "no row for schedule %s", name)
	m := regexp.MustCompile(`(?s)data-stat="` + stat + `">(.*?)</td>`).FindStringSubmatch(row[1])
	require.NotNil(t, m, "no %s cell", stat)
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

func TestSchedulesPageListsOnePageOfSchedulesWithANextPageLink(t *testing.T) {
	q := newQueue(t)
	sch := q.scheduler()
	var all []schedule.Schedule
	for i := range 52 {
		all = append(all, schedule.Schedule{Name: fmt.Sprintf("job-%02d", i), Spec: "@hourly", Topic: "orders"})
	}
	all[1] = schedule.Schedule{Name: "job-01", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", Topic: "reports"}
	q.put(sch, all...)
	_, err := sch.Pause(context.Background(), "job-01")
	require.NoError(t, err)
	srv := q.serve(dashboard.Options{})

	overview := get(t, srv.URL+"/")
	toSchedules := links(overview.body, "/schedules") // the navigation's, and the tick topic's row's
	require.NotEmpty(t, toSchedules)
	for _, l := range toSchedules {
		assert.Equal(t, "/schedules", l)
	}
	first := get(t, srv.URL+toSchedules[0])
	require.Equal(t, http.StatusOK, first.status, first.body)
	assert.Equal(t, "@hourly", scheduleCell(t, first.body, "job-00", "spec"))
	assert.Equal(t, "UTC", scheduleCell(t, first.body, "job-00", "time-zone"))
	assert.Equal(t, "orders", scheduleCell(t, first.body, "job-00", "topic"))
	assert.Equal(t, "not paused", scheduleCell(t, first.body, "job-00", "paused"))
	pending := q.schedule("job-00").Pending.UTC().Format("2006-01-02 15:04:05.000 UTC")
	assert.Contains(t, scheduleCell(t, first.body, "job-00", "next-tick"), pending)
	assert.Equal(t, "–", scheduleCell(t, first.body, "job-00", "last-tick"))
	assert.Equal(t, "–", scheduleCell(t, first.body, "job-00", "last-outcome"))
	assert.Equal(t, "0", scheduleCell(t, first.body, "job-00", "published"))
	assert.Equal(t, "0", scheduleCell(t, first.body, "job-00", "skipped"))
	assert.Equal(t, "0 3 * * *", scheduleCell(t, first.body, "job-01", "spec"))
	assert.Equal(t, "Europe/Berlin", scheduleCell(t, first.body, "job-01", "time-zone"))
	assert.Equal(t, "paused", scheduleCell(t, first.body, "job-01", "paused"))
	assert.Equal(t, "–", scheduleCell(t, first.body, "job-01", "next-tick"), "a paused schedule has no armed tick")
	assert.Contains(t, first.body, `data-schedule="job-49"`)
	assert.NotContains(t, first.body, `data-schedule="job-50"`)
	assert.Contains(t, first.body, "This dashboard is read-only")

	second := get(t, srv.URL+link(t, first.body, "after="))
	require.Equal(t, http.StatusOK, second.status, second.body)
	assert.Contains(t, second.body, `data-schedule="job-50"`)
	assert.Contains(t, second.body, `data-schedule="job-51"`)
	assert.NotContains(t, second.body, `data-schedule="job-49"`)
	assert.NotContains(t, second.body, `rel="next"`, "the last page has no next one")
	assert.Contains(t, second.body, "First page")
}

func TestSchedulePageShowsTheDefinitionStateAndNextTicks(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	sch := q.scheduler()
	q.put(sch,
		schedule.Schedule{Name: "every second/ü", Spec: "@every 1s", Topic: "orders", Payload: []byte(`{"kind":"tick"}`),
			Metadata: map[string]string{"team": "ops"}, Overlap: schedule.OverlapSkip},
		schedule.Schedule{Name: "nightly", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", Topic: "reports"},
	)
	// A Scheduler that runs publishes a tick, so that the last tick and its outcome show.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	require.Eventually(t, func() bool { return q.schedule("every second/ü").Published > 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	info := q.schedule("every second/ü")
	srv := q.serve(dashboard.Options{Prefix: "/queues"})

	list := get(t, srv.URL+"/queues/schedules")
	assert.Equal(t, "published", scheduleCell(t, list.body, info.Schedule.Name, "last-outcome"))
	assert.Contains(t, scheduleCell(t, list.body, info.Schedule.Name, "last-tick"), info.LastTick.UTC().Format("2006-01-02 15:04:05.000 UTC"))
	pageURL := link(t, list.body, "/schedules/every")
	assert.Equal(t, "/queues/schedules/"+url.PathEscape(info.Schedule.Name), pageURL)
	res := get(t, srv.URL+pageURL)
	require.Equal(t, http.StatusOK, res.status, res.body)
	body := html.UnescapeString(res.body)
	assert.Contains(t, body, `<code id="spec">@every 1s</code>`)
	assert.Contains(t, body, `<dd id="overlap">skip</dd>`)
	assert.Contains(t, body, `<dd id="catch-up">all, within 1m0s</dd>`)
	assert.Contains(t, body, `<code id="last-key">`+info.LastKey+`</code>`)
	assert.Contains(t, body, `<dd id="last-outcome">published`)
	assert.Contains(t, body, `<code id="version">`+info.Version+`</code>`)
	assert.Equal(t, "{\n  \"kind\": \"tick\"\n}", payloadOf(t, res.body))
	assert.Contains(t, body, "<code>team</code></td><td><code>ops</code>")
	assert.NotContains(t, res.body, `method="post"`, "read-only without AllowActions")

	nightly := get(t, srv.URL+"/queues/schedules/nightly")
	require.Equal(t, http.StatusOK, nightly.status, nightly.body)
	ticks := regexp.MustCompile(`<td>\w{3} \d{4}-\d\d-\d\d 03:00:00 CES?T</td>`).FindAllString(nightly.body, -1)
	assert.Len(t, ticks, schedule.DefaultNextTicks, "each next tick with its wall time in Europe/Berlin")
	assert.Contains(t, nightly.body, `<dd id="time-zone">Europe/Berlin</dd>`)

	missing := get(t, srv.URL+"/queues/schedules/nope")
	assert.Equal(t, http.StatusNotFound, missing.status)
	assert.Contains(t, missing.body, "not found")
}

func TestScheduleActionsPauseResumeTriggerAndDelete(t *testing.T) {
	q := newQueue(t)
	q.register("orders", "billing")
	sch := q.scheduler()
	q.put(sch, schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: "orders"})
	srv := q.serve(dashboard.Options{AllowActions: true, Scheduler: sch})
	pageURL := srv.URL + "/schedules/hourly"

	page := get(t, pageURL)
	assert.NotContains(t, page.body, `id="read-only"`)
	res := do(t, http.MethodPost, srv.URL+link(t, page.body, "/hourly/pause"), nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.True(t, q.schedule("hourly").Paused)
	page = get(t, srv.URL+res.location)
	assert.Contains(t, page.body, "The schedule is paused")
	assert.Contains(t, page.body, `data-action="resume"`)
	assert.Contains(t, page.body, "None while it is paused.")
	res = do(t, http.MethodPost, srv.URL+"/schedules/hourly/pause", nil)
	assert.Contains(t, get(t, srv.URL+res.location).body, "The schedule was paused already.")

	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/hourly/resume"), nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.False(t, q.schedule("hourly").Paused)
	assert.False(t, q.schedule("hourly").Pending.IsZero(), "the next tick is armed again")
	page = get(t, srv.URL+res.location)
	assert.Contains(t, page.body, "The schedule is resumed")

	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/hourly/trigger"), nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	assert.Contains(t, get(t, srv.URL+res.location).body, "The schedule&#39;s message was published, due now")
	assert.Equal(t, int64(1), q.stats("orders", "billing").Due)
	assert.Equal(t, "hourly", q.first("orders", "billing", redisdelay.StateDue).Metadata[redisdelay.ScheduleMetadataKey])

	assert.Contains(t, page.body, `hx-confirm="Delete schedule hourly?`, "delete asks first, as cancel does")
	res = do(t, http.MethodPost, srv.URL+link(t, page.body, "/hourly/delete"), nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	list := get(t, srv.URL+res.location)
	assert.Contains(t, list.body, "The schedule was deleted")
	assert.NotContains(t, list.body, `data-schedule="hourly"`)
	_, err := schedule.Get(context.Background(), q.in, "hourly")
	assert.ErrorIs(t, err, redisdelay.ErrNotFound)
	assert.Equal(t, http.StatusNotFound, do(t, http.MethodPost, pageURL+"/pause", nil).status)
}

func TestScheduleActionsAreRefusedWithoutASchedulerActionsOrAuthorization(t *testing.T) {
	q := newQueue(t)
	sch := q.scheduler()
	q.put(sch, schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: "orders"})

	for _, tc := range []struct {
		opts     dashboard.Options
		readOnly string
		refusal  string
	}{
		{dashboard.Options{Scheduler: sch}, "This dashboard is read-only", "read-only"},
		{dashboard.Options{AllowActions: true}, "this dashboard was given no Scheduler", "no Scheduler"},
		{dashboard.Options{AllowActions: true, Scheduler: sch, Authorize: func(*http.Request) bool { return false }},
			"You are not authorized to act on schedules", "not authorized"},
	} {
		srv := q.serve(tc.opts)
		for _, u := range []string{"/schedules", "/schedules/hourly"} {
			page := get(t, srv.URL+u)
			require.Equal(t, http.StatusOK, page.status, page.body)
			assert.Contains(t, page.body, tc.readOnly, u)
			assert.NotContains(t, page.body, `method="post"`, u)
		}
		for _, action := range []string{"pause", "resume", "trigger", "delete"} {
			res := do(t, http.MethodPost, srv.URL+"/schedules/hourly/"+action, nil)
			assert.Equal(t, http.StatusForbidden, res.status, action)
			assert.Contains(t, res.body, tc.refusal, action)
		}
	}
	info := q.schedule("hourly")
	assert.False(t, info.Paused)
	assert.Zero(t, info.Published)

	// Another site's page cannot make an operator's browser act.
	srv := q.serve(dashboard.Options{AllowActions: true, Scheduler: sch})
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/schedules/hourly/delete", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	q.schedule("hourly")
}

func TestSchedulesOfTopicsNotOnTheDashboardAreLeftOut(t *testing.T) {
	q := newQueue(t)
	sch := q.scheduler()
	q.put(sch,
		schedule.Schedule{Name: "orders-hourly", Spec: "@hourly", Topic: "orders"},
		schedule.Schedule{Name: "secret-hourly", Spec: "@hourly", Topic: "secrets"},
	)
	srv := q.serve(dashboard.Options{Topics: []string{"orders"}, AllowActions: true, Scheduler: sch})

	list := get(t, srv.URL+"/schedules")
	assert.Contains(t, list.body, `data-schedule="orders-hourly"`)
	assert.NotContains(t, list.body, "secret-hourly")
	assert.Contains(t, list.body, "1 schedules on this page publish to topics that are not on this dashboard")
	assert.Equal(t, http.StatusNotFound, get(t, srv.URL+"/schedules/secret-hourly").status)
	assert.Equal(t, http.StatusNotFound, do(t, http.MethodPost, srv.URL+"/schedules/secret-hourly/pause", nil).status)
	assert.False(t, q.schedule("secret-hourly").Paused)
}

// TestASchedulerOfAnotherKeyPrefixOrClientIsRefused: the schedule actions would change other
// schedules than the pages show, so New refuses such a Scheduler.
func TestASchedulerOfAnotherKeyPrefixOrClientIsRefused(t *testing.T) {
	q := newQueue(t)
	for name, cfg := range map[string]redisdelay.PublisherConfig{
		"key prefix": {Client: q.client, KeyPrefix: "other:"},
		"client":     {Client: q.srv.Client(t)},
	} {
		pub, err := redisdelay.NewPublisher(cfg, nil)
		require.NoError(t, err)
		sch, err := schedule.New(schedule.Config{Publisher: pub}, nil)
		require.NoError(t, err)
		_, err = dashboard.New(q.in, dashboard.Options{Scheduler: sch})
		assert.ErrorContains(t, err, "give both the same client and key prefix", name)
	}
	_, err := dashboard.New(q.in, dashboard.Options{Scheduler: q.scheduler()})
	assert.NoError(t, err, "the Inspector's own client and key prefix")
}
