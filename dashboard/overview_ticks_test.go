package dashboard_test

import (
	"context"
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
	sch, err := schedule.New(schedule.Config{Publisher: kit.Publisher()}, nil)
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
	kit, _, srv := kitDashboard(t)

	res := get(t, srv.URL+"/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	row := cell(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "paused")
	assert.Contains(t, row, "internal: the schedules' ticks; no Scheduler has run here yet. Start one: <code>schedule.New(")
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
	assert.Contains(t, row, "no Scheduler has run on this Redis and key prefix. Start one")
	cellLevel, rowLevel := level(t, res.body, schedule.TickTopic, redisdelay.ParkedGroup, "paused")
	assert.Equal(t, "alarm", cellLevel)
	assert.Equal(t, "alarm", rowLevel)
}

func TestOverviewSaysNoSchedulerIsRunningWhenTicksWaitForOneThatRanBefore(t *testing.T) {
	kit, sch, srv := kitDashboard(t)
	// A Scheduler that ran registered its consumer group on the tick topic, then stopped.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	require.Eventually(t, func() bool {
		st, err := kit.Inspector().Stats(context.Background(), schedule.TickTopic)
		return err == nil && len(st) == 1 && st[0].Group == schedule.TickGroup
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	res := get(t, srv.URL+"/")
	assert.Equal(t, `internal: the schedules' ticks · <a href="/schedules">schedules</a>`, cell(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused"))
	kit.Advance(time.Hour + schedule.DefaultLeaseTimeout + time.Second)
	res = get(t, srv.URL+"/")
	row := cell(t, res.body, schedule.TickTopic, schedule.TickGroup, "paused")
	assert.Contains(t, row, "overdue")
	assert.Contains(t, row, "not acted on: no Scheduler is running. Start one")
}

func TestSchedulePageListsAPastPendingTickFirstAmongItsNextTicks(t *testing.T) {
	kit, _, srv := kitDashboard(t)
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
