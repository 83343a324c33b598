package main

import (
	"testing"

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
