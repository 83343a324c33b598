package browsertest

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/dashboard"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// workerRecords waits until in lists n worker records of kind, and returns them.
func workerRecords(t *testing.T, in *redisdelay.Inspector, kind redisdelay.WorkerKind, n int) []redisdelay.WorkerInfo {
	var page redisdelay.WorkersPage
	require.Eventually(t, func() bool {
		var err error
		page, err = in.Workers(context.Background(), redisdelay.WorkersOptions{Kind: kind, Limit: 10})
		return err == nil && len(page.Workers) == n
	}, 10*time.Second, 10*time.Millisecond, "%d %s records", n, kind)
	return page.Workers
}

func TestOperatorSeesTheRunningSubscriberAndSchedulerOnTheWorkersPage(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client}, nil)
	require.NoError(t, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "billing"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	sch, err := schedule.New(schedule.Config{Publisher: pub}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	subscriber := workerRecords(t, in, redisdelay.WorkerSubscriber, 1)[0]
	scheduler := workerRecords(t, in, redisdelay.WorkerScheduler, 1)[0]
	srv := serve(t, in, dashboard.Options{Prefix: "/queues"})
	bctx, c := browser(t)

	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/queues/")))
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#sections a[href$="/workers"]`))))
	row := func(id, stat string) string {
		return text(t, bctx, `tr[data-worker="`+id+`"] td[data-stat="`+stat+`"]`)
	}
	assert.Equal(t, "subscriber", row(subscriber.ID, "kind"))
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, row(subscriber.ID, "host"))
	assert.Equal(t, strconv.Itoa(os.Getpid()), row(subscriber.ID, "pid"))
	assert.Equal(t, "orders · billing", row(subscriber.ID, "subscriptions"))
	assert.Equal(t, "0", row(subscriber.ID, "in-flight"))
	assert.Equal(t, "scheduler", row(scheduler.ID, "kind"))
	assert.Equal(t, schedule.TickTopic+" · "+schedule.TickGroup, row(scheduler.ID, "subscriptions"))
	n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#workers tbody tr").length`))
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	screenshot(t, bctx, "workers")

	// Its subscription links to the group's page.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`tr[data-worker="`+subscriber.ID+`"] td[data-stat="subscriptions"] a`))))
	// A click does not wait for the page it opens: wait for the group page's tabs first.
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`nav.tabs a.active`))))
	location, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, srv.URL+"/queues/topic/orders/group/billing", location)
	noViolations(t, bctx, c)
}

func TestOperatorSeesAnOverdueTickFlaggedWithTheFix(t *testing.T) {
	kit := redisdelaytest.New(t, redisdelaytest.Options{})
	sch, err := schedule.New(schedule.Config{Publisher: kit.Publisher()}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sch.Close() })
	_, err = sch.Put(context.Background(), schedule.Schedule{Name: "nightly-report", Spec: "0 3 * * *", Topic: "reports"})
	require.NoError(t, err)
	// No Scheduler runs: the 03:00 tick falls due and nobody acts on it. (Closed, so that the
	// kit does not wait for a Scheduler made on its Publisher and never run.)
	require.NoError(t, sch.Close())
	kit.Advance(4 * time.Hour)
	info, err := schedule.Get(context.Background(), kit.Inspector(), "nightly-report")
	require.NoError(t, err)
	require.True(t, info.Overdue)
	srv := serve(t, kit.Inspector(), dashboard.Options{})
	bctx, c := browser(t)

	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/schedules")))
	mark := `tr[data-schedule="nightly-report"] td[data-stat="next-tick"] [data-overdue="tick"]`
	assert.Equal(t, "overdue", text(t, bctx, mark))
	assert.Equal(t, alarmBackground, style(t, bctx, mark, "background-color"), "a red mark")
	assert.Contains(t, text(t, bctx, "#overdue"), info.OverdueReason)
	assert.Contains(t, info.OverdueReason, "no Scheduler is running")
	screenshot(t, bctx, "schedules-overdue")

	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly-report"] a`))))
	assert.Equal(t, info.OverdueReason, text(t, bctx, "#overdue-reason"))
	assert.Contains(t, text(t, bctx, `#next-ticks tr[data-tick="pending"]`), "overdue", "the next ticks start with the pending one")
	screenshot(t, bctx, "schedule-overdue")

	// The overview labels the tick topic internal, with the same fix.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")))
	ticks := `tr[data-topic="` + schedule.TickTopic + `"]`
	assert.Equal(t, "internal", text(t, bctx, ticks+` [data-internal="ticks"]`))
	assert.Contains(t, text(t, bctx, ticks+` td[data-stat="paused"]`), "no Scheduler is running")
	screenshot(t, bctx, "overview-ticks")
	noViolations(t, bctx, c)
}
