package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

func TestStatsLabelsTheTickTopicAsInternalNeverAsParked(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.register(topic, group)
	q.put(schedule.Schedule{Name: "nightly", Spec: "@daily", Topic: topic})

	var stats []statsView
	q.json(&stats, "stats")
	var tick statsView
	for _, s := range stats {
		if s.Topic == schedule.TickTopic {
			tick = s
		}
	}
	require.True(t, tick.Internal, "%+v", stats)
	assert.False(t, tick.Parked, "an internal topic is not a parked queue")
	assert.Equal(t, int64(1), tick.Scheduled, "the schedule's next tick")

	out := q.ok("stats")
	assert.Regexp(t, `(?m)^redisdelay\.schedules \(internal\)\s+\(no Scheduler\)\s+1\s`, out)
	assert.NotContains(t, out, "(parked)")
	assert.Contains(t, out, "(internal): the topic of the schedules' ticks")
	assert.Contains(t, out, "(no Scheduler): no Scheduler has ever run under this key prefix")

	q.register(schedule.TickTopic, schedule.TickGroup) // as a Scheduler's start does
	out = q.ok("stats")
	assert.Regexp(t, `(?m)^redisdelay\.schedules \(internal\)\s+scheduler\s+1\s`, out)
	assert.NotContains(t, out, "(no Scheduler)")
	assert.Regexp(t, `(?m)^orders\s+default\s`, out, "an application's topic is not labelled")
}

func TestSchedulesListFlagsAnOverdueTickWhenNoSchedulerRuns(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	q.put(
		schedule.Schedule{Name: "every-second", Spec: "@every 1s", Topic: topic},
		schedule.Schedule{Name: "nightly", Spec: "@daily", Topic: topic},
	)
	var page schedulePageView
	q.json(&page, "schedules", "list")
	require.Len(t, page.Schedules, 2)
	require.False(t, page.Schedules[0].Overdue, "its first tick is a second away")

	// No Scheduler runs: the tick falls due and stays pending past the lease
	// (schedule.DefaultLeaseTimeout when no Scheduler's record says otherwise).
	deadline := time.Now().Add(schedule.DefaultLeaseTimeout + runTimeout)
	poll := time.NewTicker(200 * time.Millisecond) // a listing runs the command: not in a busy loop
	defer poll.Stop()
	for !page.Schedules[0].Overdue {
		require.True(t, time.Now().Before(deadline), "the tick was never flagged overdue: %+v", page.Schedules[0])
		<-poll.C
		page = schedulePageView{}
		q.json(&page, "schedules", "list")
	}
	every, nightly := page.Schedules[0], page.Schedules[1]
	const reason = `no Scheduler is running for key prefix "redisdelay:": start one (schedule.New, then Run)`
	assert.Equal(t, reason, every.OverdueReason)
	assert.Less(t, time.Since(deref(every.Pending)), schedule.DefaultLeaseTimeout+runTimeout)
	assert.Greater(t, time.Since(deref(every.Pending)), schedule.DefaultLeaseTimeout, "overdue only past the lease")
	assert.Equal(t, [2]any{false, ""}, [2]any{nightly.Overdue, nightly.OverdueReason}, "a tick still ahead is not overdue")

	out := q.ok("schedules", "list")
	assert.Regexp(t, `(?m)^every-second\s+@every 1s\s+UTC\s+orders\s+false\s+\S+ OVERDUE\s+-\s+-\s+0\s+0$`, out)
	assert.Regexp(t, `(?m)^nightly\s+@daily\s+UTC\s+orders\s+false\s+\S+\s+-\s+-\s+0\s+0$`, out)
	assert.Contains(t, out, "\nOVERDUE (every-second): "+reason+"\n")
	assert.Equal(t, 1, strings.Count(out, reason), "the reason once")
	assert.Regexp(t, `(?m)^overdue:\s+yes: `+regexp.QuoteMeta(reason)+`$`, q.ok("schedules", "show", "every-second"))
	assert.Regexp(t, `(?m)^overdue:\s+no$`, q.ok("schedules", "show", "nightly"))
}
