package dashboard

// This file owns the overview's row of the schedules' tick topic (schedule.TickTopic), an
// internal topic: each armed schedule has one message there, its pending tick, due at the
// tick's time, which a Scheduler (consumer group schedule.TickGroup) claims and acts on. Its
// row says so, and says what to do when no Scheduler acts on the ticks, instead of showing a
// queue that waits, parked, for a consumer group.

import (
	"html"
	"strconv"
	"strings"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// ticksOverdue reports whether the tick topic's stats show a tick that no Scheduler acted on
// within its lease (schedule.DefaultLeaseTimeout): a Scheduler claims a tick as soon as it is
// due, so one that waited longer has none running, or none that reaches Redis.
func ticksOverdue(st redisdelay.GroupStats) bool {
	return st.Due > 0 && st.OldestDueAge >= schedule.DefaultLeaseTimeout
}

// writeTicksCell writes the delivery cell of the tick topic's row: "internal", with an overdue
// mark and the fix in words when ticks wait for a Scheduler. schedules is the schedules page's
// URL.
func writeTicksCell(b *strings.Builder, st redisdelay.GroupStats, lv groupLevels, schedules string) {
	var v strings.Builder
	l := levelNone
	armed := st.Scheduled + st.Due + st.InFlight
	switch {
	case ticksOverdue(st):
		l = levelAlarm
		v.WriteString(`<span class="badge alarm" data-overdue="ticks">overdue</span> `)
		v.WriteString(html.EscapeString(plural(st.Due, "tick") + " due " + shortDuration(st.OldestDueAge) + " ago and not acted on: "))
		if st.Group == redisdelay.ParkedGroup {
			v.WriteString("no Scheduler has run on this Redis and key prefix. ")
		} else {
			v.WriteString("no Scheduler is running. ")
		}
		v.WriteString(startScheduler)
	case st.Paused:
		l = lv.Paused
		v.WriteString(`<span class="badge ` + string(lv.Paused) + `">paused</span> Schedulers claim no tick until the group ` + schedule.TickGroup + ` is resumed`)
	case st.Group == redisdelay.ParkedGroup && armed > 0:
		l = levelWarn
		v.WriteString("internal: the schedules' ticks; no Scheduler has run here yet. ")
		v.WriteString(startScheduler)
	default:
		v.WriteString("internal: the schedules' ticks")
	}
	v.WriteString(` · <a href="` + html.EscapeString(schedules) + `">schedules</a>`)
	writeCell(b, "", "paused", l, v.String())
}

// startScheduler says how to start a Scheduler, in HTML.
const startScheduler = `Start one: <code>schedule.New(schedule.Config{Publisher: pub}, logger)</code>, then <code>Run(ctx)</code>.`

// plural returns "n thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}
