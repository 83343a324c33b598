package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// kitDashboard returns a test kit's queue (virtual clock) with an hourly schedule put and no
// Scheduler running, its Scheduler, and its dashboard.
func kitDashboard(t *testing.T) (*redisdelaytest.Queue, *schedule.Scheduler, *httptest.Server) {
	kit := redisdelaytest.New(t, redisdelaytest.Options{})
	sch, err := schedule.New(schedule.Config{Publisher: kit.Publisher(), WorkerHeartbeat: 50 * time.Millisecond}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sch.Close() })
	_, err = sch.Put(context.Background(), schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: "reports"})
	require.NoError(t, err)
	h, err := dashboard.New(kit.Inspector(), dashboard.Options{RefreshInterval: -1})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return kit, sch, srv
}

func TestOverviewLabelsTheTickTopicInternalAndSaysToStartAScheduler(t *testing.T) {
	kit, sch, srv := kitDashboard(t)
	require.NoError(t, sch.Close()) // no Scheduler runs: one made and never run would hold up Advance

	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	row := cell(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "paused")
	assert.Contains(t, row, "internal: the schedules' ticks; no Scheduler is running, so none will be acted on. Start one (<code>schedule.New</code>, then <code>Run</code>).")
	assert.NotContains(t, row, "waits for a first group", "not a parked queue")
	assert.NotContains(t, row, "overdue")
	assert.Equal(t, "1", cell(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "scheduled"), "the armed tick")
	assert.True(t, strings.Contains(res.body, `data-internal="ticks"`), "the topic is marked internal")
	assert.True(t, strings.Contains(res.body, `class="internal">no Scheduler yet</a>`), "its group is the Schedulers'")

	// No Scheduler acts on the tick when it falls due: it is overdue once a lease has passed.
	kit.Advance(time.Hour + schedule.DefaultLeaseTimeout + time.Second)
	res = get(t, srv.URL+"/")
	row = cell(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "paused")
	assert.Contains(t, row, `<span class="badge alarm" data-overdue="ticks">overdue</span> 1 tick due`)
	assert.Contains(t, row, "not acted on: no Scheduler is running. Start one")
	cellLevel, rowLevel := level(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "paused")
	assert.Equal(t, "alarm", cellLevel)
	assert.Equal(t, "alarm", rowLevel)
}

// schedulerRecords waits until in has n worker records of Schedulers.
func schedulerRecords(t *testing.T, in *redisdelay.Inspector, n int) {
	require.Eventually(t, func() bool {
		page, err := in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: redisdelay.WorkerScheduler, Limit: 10})
		return err == nil && len(page.Workers) == n
	}, 10*time.Second, 10*time.Millisecond, "%d Scheduler records", n)
}

func TestOverviewTickRowSaysWhetherASchedulerRuns(t *testing.T) {
	kit, sch, srv := kitDashboard(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	schedulerRecords(t, kit.Inspector(), 1)

	res := get(t, srv.URL+"/")
	assert.Equal(t, `internal: the schedules' ticks · <a href="/schedules">schedules</a>`, cell(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused"))
	cellLevel, _ := level(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused")
	assert.Empty(t, cellLevel)

	// Run returns: the Scheduler keeps its record until Close, without its subscription to the
	// ticks, and the overview says before a tick is late that none runs.
	cancel()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool {
		page, err := kit.Inspector().Workers(context.Background(), redisdelay.WorkersOptions{Kind: redisdelay.WorkerScheduler})
		return err == nil && len(page.Workers) == 1 && len(page.Workers[0].Subscriptions) == 0
	}, 10*time.Second, 10*time.Millisecond)
	res = get(t, srv.URL+"/")
	assert.Contains(t, cell(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused"), "no Scheduler is running, so none will be acted on. Start one")
	cellLevel, _ = level(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused")
	assert.Equal(t, "warn", cellLevel)

	kit.Advance(time.Hour + schedule.DefaultLeaseTimeout + time.Second)
	res = get(t, srv.URL+"/")
	row := cell(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused")
	assert.Contains(t, row, "overdue")
	assert.Contains(t, row, "not acted on: no Scheduler is running. Start one")
}

func TestSchedulesPagesMarkAnOverdueTickWithTheFixInWords(t *testing.T) {
	kit, sch, srv := kitDashboard(t)
	require.NoError(t, sch.Close()) // no Scheduler runs: one made and never run would hold up Advance
	list := get(t, srv.URL+"/schedules")
	require.Equal(t, http.StatusOK, list.status, list.body)
	assert.NotContains(t, scheduleCell(t, list.body, "hourly", "next-tick"), "overdue")
	assert.False(t, strings.Contains(list.body, `id="overdue"`), "nothing is overdue yet")

	kit.Advance(time.Hour + schedule.DefaultLeaseTimeout + time.Second)
	info, err := schedule.Get(context.Background(), kit.Inspector(), "hourly")
	require.NoError(t, err)
	require.True(t, info.Overdue)
	require.NotEmpty(t, info.OverdueReason)
	reason := html.EscapeString(info.OverdueReason)

	list = get(t, srv.URL+"/schedules")
	assert.Contains(t, scheduleCell(t, list.body, "hourly", "next-tick"), "overdue")
	assert.True(t, strings.Contains(list.body, `<p class="overdue-reason">`+reason+`</p>`), "the list says why: %s", info.OverdueReason)
	page := get(t, srv.URL+"/schedules/hourly")
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.True(t, strings.Contains(page.body, `<span id="overdue-reason">`+reason+`</span>`), "the page says why")
	assert.Regexp(t, `<dd id="pending"><time[^>]*>[^<]*</time> <span class="muted">[^<]*</span> <span class="badge alarm" data-overdue="tick"`, page.body)
	assert.Regexp(t, `<tr data-tick="pending">.*armed <span class="badge alarm" data-overdue="tick">overdue</span>`, page.body)
}

func TestSchedulePageListsAPastPendingTickFirstAmongItsNextTicks(t *testing.T) {
	kit, sch, srv := kitDashboard(t)
	require.NoError(t, sch.Close()) // no Scheduler runs: one made and never run would hold up Advance
	kit.Advance(3*time.Hour + schedule.DefaultLeaseTimeout)
	info, err := schedule.Get(context.Background(), kit.Inspector(), "hourly")
	require.NoError(t, err)
	require.True(t, info.Pending.Before(kit.Now()), "no Scheduler acted on the tick")

	res := get(t, srv.URL+"/schedules/hourly")
	require.Equal(t, http.StatusOK, res.status, res.body)
	ticks := regexp.MustCompile(`<tr( data-tick="pending")?><td><time datetime="([^"]+)"`).FindAllStringSubmatch(res.body, -1)
	require.NotEmpty(t, ticks)
	assert.NotEmpty(t, ticks[0][1], "the first tick listed is the armed one")
	assert.Equal(t, info.Pending.UTC().Format(time.RFC3339Nano), ticks[0][2])
	for i, tick := range ticks[1:] {
		assert.Empty(t, tick[1], i)
		at, err := time.Parse(time.RFC3339Nano, tick[2])
		require.NoError(t, err)
		assert.True(t, at.After(info.Pending), "tick %d, %s, comes after the armed one", i+1, at)
	}
}

func TestTheTickTopicsPageSaysItIsInternal(t *testing.T) {
	_, _, srv := kitDashboard(t)
	overview := get(t, srv.URL+"/")
	res := get(t, srv.URL+link(t, overview.body, "/topic/"+schedule.TickTopic+"/parked"))
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.True(t, strings.Contains(res.body, `<p class="note" id="internal">An internal topic: the schedules' ticks`), "the page says what the topic is")
	assert.True(t, strings.Contains(res.body, `<span class="badge" data-internal="ticks">internal</span>`), "marked internal")
	assert.False(t, strings.Contains(res.body, "no consumer group</span>"), "not a parked queue")
	assert.True(t, strings.Contains(res.body, `See the <a href="/schedules">schedules</a> and the running <a href="/workers">workers</a>.`), "links to both")
}
