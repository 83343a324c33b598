package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// scheduler returns a Scheduler on the queue's Redis, closed when the test ends.
func (q *queue) scheduler() *schedule.Scheduler {
	q.t.Helper()
	sch, err := schedule.New(schedule.Config{Publisher: q.pub}, nil)
	require.NoError(q.t, err)
	q.t.Cleanup(func() { _ = sch.Close() })
	return sch
}

// put stores schedules through a Scheduler.
func (q *queue) put(schedules ...schedule.Schedule) {
	q.t.Helper()
	sch := q.scheduler()
	for _, s := range schedules {
		_, err := sch.Put(context.Background(), s)
		require.NoError(q.t, err)
	}
}

// scheduleInfo returns the Inspector's view of schedule name.
func (q *queue) scheduleInfo(name string) schedule.Info {
	q.t.Helper()
	info, err := schedule.Get(context.Background(), q.in, name)
	require.NoError(q.t, err)
	return info
}

func TestSchedulesListPrintsOnePageAndWhereTheNextStarts(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(
		schedule.Schedule{Name: "a-hourly", Spec: "@hourly", Topic: topic},
		schedule.Schedule{Name: "b-berlin", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", Topic: "reports"},
		schedule.Schedule{Name: "c-last", Spec: "@daily", Topic: topic},
	)
	_, err := q.scheduler().Pause(context.Background(), "b-berlin")
	require.NoError(t, err)

	var first, second schedulePageView
	q.json(&first, "schedules", "list", "--limit", "2")
	require.Len(t, first.Schedules, 2)
	assert.Equal(t, "a-hourly", first.Schedules[0].Name)
	assert.Equal(t, "b-berlin", first.NextAfter)
	q.json(&second, "schedules", "list", "--after", first.NextAfter)
	require.Len(t, second.Schedules, 1)
	assert.Equal(t, "c-last", second.Schedules[0].Name)
	assert.Empty(t, second.NextAfter, "the last page names no next one")

	hourly, berlin := first.Schedules[0], first.Schedules[1]
	assert.Equal(t, "@hourly", hourly.Spec)
	assert.Equal(t, topic, hourly.Topic)
	assert.False(t, hourly.Paused)
	require.NotNil(t, hourly.Pending)
	assert.True(t, q.scheduleInfo("a-hourly").Pending.Equal(*hourly.Pending))
	assert.Equal(t, *hourly.Pending, hourly.Pending.Truncate(time.Hour), "the armed tick is a full hour")
	assert.Len(t, hourly.NextTicks, schedule.DefaultNextTicks)
	assert.Equal(t, "Europe/Berlin", berlin.TimeZone)
	assert.True(t, berlin.Paused)
	assert.Nil(t, berlin.Pending, "a paused schedule has no armed tick")

	out := q.ok("schedules", "list", "--limit", "2")
	assert.Regexp(t, `(?m)^NAME\s+SPEC\s+TIME ZONE\s+TOPIC\s+PAUSED\s+NEXT TICK\s+LAST TICK\s+LAST OUTCOME\s+PUBLISHED\s+SKIPPED$`, out)
	assert.Regexp(t, `(?m)^a-hourly\s+@hourly\s+UTC\s+orders\s+false\s+`+regexp.QuoteMeta(formatTime(*hourly.Pending))+`\s+-\s+-\s+0\s+0$`, out)
	assert.Regexp(t, `(?m)^b-berlin\s+0 3 \* \* \*\s+Europe/Berlin\s+reports\s+true\s+-\s+-\s+-\s+0\s+0$`, out)
	assert.Contains(t, out, "next page: --after b-berlin")
}

func TestSchedulesShowPrintsTheDefinitionTheStateAndTheNextTicks(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.put(schedule.Schedule{
		Name: "every-second", Spec: "@every 1s", Topic: topic, Payload: []byte("tick"),
		Metadata: map[string]string{"source": "cron"}, Overlap: schedule.OverlapSkip, Jitter: 10 * time.Millisecond,
	})
	// A Scheduler that runs publishes a tick, so that the last tick and its outcome show.
	sch := q.scheduler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	require.Eventually(t, func() bool { return q.scheduleInfo("every-second").Published > 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	info := q.scheduleInfo("every-second")

	var v scheduleView
	q.json(&v, "schedules", "show", "every-second")
	assert.Equal(t, "every-second", v.Name)
	assert.Equal(t, "@every 1s", v.Spec)
	assert.Equal(t, "skip", v.Overlap)
	assert.Equal(t, "all", v.CatchUp)
	assert.Equal(t, 60.0, v.CatchUpWindowSeconds)
	assert.Equal(t, 0.01, v.JitterSeconds)
	assert.Equal(t, "tick", v.Payload)
	assert.Equal(t, map[string]string{"source": "cron"}, v.Metadata)
	assert.Equal(t, info.Version, v.Version)
	assert.GreaterOrEqual(t, v.Published, int64(1))
	require.NotNil(t, v.LastTick)
	assert.True(t, info.LastTick.Equal(*v.LastTick))
	assert.Equal(t, schedule.TickKey("every-second", info.LastTick), v.LastKey)
	assert.Equal(t, "published", v.LastOutcome)
	assert.Len(t, v.NextTicks, schedule.DefaultNextTicks)

	out := q.ok("schedules", "show", "every-second")
	for _, want := range []string{
		`^name:\s+every-second$`, `^spec:\s+@every 1s$`, `^time zone:\s+UTC$`, `^topic:\s+orders$`, `^overlap:\s+skip$`,
		`^jitter:\s+10ms$`, `^paused:\s+false$`, `^last outcome:\s+published$`,
		`^last key:\s+` + regexp.QuoteMeta(v.LastKey) + `$`, `^next ticks:\s+` + regexp.QuoteMeta(formatTime(v.NextTicks[0])) + `$`,
		`^metadata:\s+source=cron$`, `^payload:\ntick$`,
	} {
		assert.Regexp(t, "(?m)"+want, out)
	}
}

func TestSchedulesShowGivesTheWallTimeInTheSchedulesTimeZone(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(schedule.Schedule{Name: "nightly", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", Topic: topic})

	out := q.ok("schedules", "show", "nightly")
	assert.Regexp(t, `(?m)^time zone:\s+Europe/Berlin$`, out)
	assert.Regexp(t, `(?m)^next ticks:\s+\S+Z \(\d{4}-\d\d-\d\d 03:00:00 CES?T\)$`, out)
}

func TestSchedulesPutCreatesAndUpdatesASchedule(t *testing.T) {
	t.Parallel()
	q := newQueue(t)

	out := q.ok("schedules", "put", "report", "--spec", "@daily", "--topic", "reports", "--tz", "America/New_York",
		"--payload", `{"kind":"daily"}`, "--metadata", "team=ops", "--overlap", "buffer-one", "--catch-up", "latest",
		"--catch-up-window", "5m", "--jitter", "1s")
	assert.Equal(t, "Schedule report: created.\n", out)
	s := q.scheduleInfo("report").Schedule
	assert.Equal(t, schedule.Schedule{
		Name: "report", Spec: "@daily", TimeZone: "America/New_York", Topic: "reports", Payload: []byte(`{"kind":"daily"}`),
		Metadata: map[string]string{"team": "ops"}, Overlap: schedule.OverlapBufferOne, CatchUp: schedule.CatchUpLatest,
		CatchUpWindow: 5 * time.Minute, Jitter: time.Second,
	}, s)

	var res map[string]string
	q.json(&res, "schedules", "put", "report", "--spec", "@hourly", "--topic", "reports")
	assert.Equal(t, map[string]string{"schedule": "report", "outcome": "updated"}, res)
	assert.Equal(t, "@hourly", q.scheduleInfo("report").Schedule.Spec)
	assert.Equal(t, "Schedule report: unchanged.\n", q.ok("schedules", "put", "report", "--spec", "@hourly", "--topic", "reports"))

	r := q.run("", "schedules", "put", "report", "--spec", "every day", "--topic", "reports")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `redisdelay: schedule: invalid schedule "report": Spec "every day": `)
	assert.Equal(t, "@hourly", q.scheduleInfo("report").Schedule.Spec, "a bad definition stores nothing")
}

func TestSchedulesPauseResumeAndTriggerActOnTheSchedule(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.put(schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: topic, Payload: []byte("now")})

	assert.Equal(t, "Schedule hourly is paused.\n", q.ok("schedules", "pause", "hourly"))
	assert.True(t, q.scheduleInfo("hourly").Paused)
	assert.True(t, q.scheduleInfo("hourly").Pending.IsZero())
	assert.Equal(t, "Schedule hourly was paused already; nothing changed.\n", q.ok("schedules", "pause", "hourly"))
	var res map[string]any
	q.json(&res, "schedules", "resume", "hourly")
	assert.Equal(t, map[string]any{"schedule": "hourly", "paused": false, "changed": true}, res)
	assert.False(t, q.scheduleInfo("hourly").Paused)
	assert.False(t, q.scheduleInfo("hourly").Pending.IsZero(), "the next tick is armed again")
	assert.Equal(t, "Schedule hourly was resumed already; nothing changed.\n", q.ok("schedules", "resume", "hourly"))

	var trig map[string]string
	q.json(&trig, "schedules", "trigger", "hourly")
	require.NotEmpty(t, trig["uuid"])
	assert.Equal(t, int64(1), q.stats(topic, group).Due, "the message is due at once")
	page, err := q.in.List(context.Background(), topic, group, redisdelay.ListOptions{State: redisdelay.StateDue})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	m := page.Messages[0]
	assert.Equal(t, trig["uuid"], m.UUID)
	assert.Equal(t, "hourly", m.Metadata[redisdelay.ScheduleMetadataKey])
	assert.Regexp(t, `^Published the message of schedule hourly now: UUID \S+\.\n$`, q.ok("schedules", "trigger", "hourly"))
}

func TestSchedulesBackfillPublishesEachTickOnce(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.put(schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: topic})
	from, to := "2026-01-01T00:00:00Z", "2026-01-01T03:00:00Z"

	r := q.run("n\n", "schedules", "backfill", "hourly", "--from", from, "--to", to)
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "Publish the ticks of schedule hourly from 2026-01-01T00:00:00.000Z to 2026-01-01T03:00:00.000Z? [y/N] redisdelay: not confirmed; nothing was changed\n", r.stderr)

	r = q.run("y\n", "schedules", "backfill", "hourly", "--from", from, "--to", to)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "Backfilled schedule hourly: published 4 ticks; 0 were published already.\n", r.stdout)
	assert.Equal(t, int64(4), q.stats(topic, group).Due)
	_, err := q.in.Message(context.Background(), topic, redisdelay.ByKey(schedule.TickKey("hourly", time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC))).InGroup(group))
	assert.NoError(t, err, "each tick's message has the tick's key")

	var res map[string]any
	q.json(&res, "schedules", "backfill", "hourly", "--from", from, "--to", "2026-01-01T04:00:00Z", "--yes")
	assert.Equal(t, map[string]any{"schedule": "hourly", "published": 1.0, "duplicates": 4.0}, res)
	assert.Equal(t, int64(5), q.stats(topic, group).Due)

	r = q.run("", "schedules", "backfill", "hourly", "--from", to, "--to", from, "--yes")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "redisdelay: --to "+from+" is before --from "+to+"\n", r.stderr)
	r = q.run("", "schedules", "backfill", "hourly", "--from", "yesterday", "--to", to, "--yes")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "redisdelay: --from: ")
}

func TestSchedulesDeleteAsksThenDeletes(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: topic})

	for _, answer := range []string{"n\n", ""} {
		r := q.run(answer, "schedules", "delete", "hourly")
		assert.Equal(t, 1, r.code)
		assert.Equal(t, "Delete schedule hourly? [y/N] redisdelay: not confirmed; nothing was changed\n", r.stderr)
	}
	q.scheduleInfo("hourly")

	r := q.run("yes\n", "schedules", "delete", "hourly")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "Deleted schedule hourly.\n", r.stdout)
	_, err := schedule.Get(context.Background(), q.in, "hourly")
	assert.ErrorIs(t, err, redisdelay.ErrNotFound)
}

func TestSchedulesCommandsNameAMissingSchedule(t *testing.T) {
	t.Parallel()
	q := newQueue(t)

	for _, args := range [][]string{
		{"show", "nope"}, {"pause", "nope"}, {"resume", "nope"}, {"trigger", "nope"},
		{"backfill", "nope", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T01:00:00Z"}, {"delete", "nope"},
	} {
		r := q.run("", append([]string{"--output", "json", "--yes", "schedules"}, args...)...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stdout, `"kind":"not-found"`, args)
		assert.Contains(t, r.stdout, `schedule \"nope\": not found`, args)
	}
	var page schedulePageView
	q.json(&page, "schedules", "list")
	assert.Empty(t, page.Schedules)
	assert.Regexp(t, `^NAME\s+SPEC\s+[^\n]+\n$`, q.ok("schedules", "list"), "a header and no row")
}

func TestDashboardWithAllowActionsPausesSchedules(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(schedule.Schedule{Name: "hourly", Spec: "@hourly", Topic: topic})

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--addr", q.addr, "dashboard", "--listen", "127.0.0.1:0", "--allow-actions")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	url := strings.TrimSpace(strings.TrimPrefix(line, "dashboard on "))

	res, err := noRedirect.PostForm(url+"schedules/hourly/pause", nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusSeeOther, res.StatusCode)
	assert.True(t, q.scheduleInfo("hourly").Paused, "the dashboard acts on schedules through a Scheduler")

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
}

// noRedirect is an HTTP client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
