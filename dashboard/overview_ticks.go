package dashboard

// This file owns the overview's row of the schedules' tick topic (schedule.TickTopic), an
// internal topic: each armed schedule has one message there, its pending tick, due at the
// tick's time, which a Scheduler (consumer group schedule.TickGroup) claims and acts on. Its
// row says so, and says what to do when no Scheduler acts on the ticks, instead of showing a
// queue that waits, parked, for a consumer group.

import (
	"context"
	"html"
	"slices"
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

// schedulerRecordsPage is how many Scheduler records the overview reads to tell whether one
// runs: one bounded page, as schedule.List reads to explain an overdue tick.
const schedulerRecordsPage = 100

// schedulersRunning reports whether a Scheduler runs, when stats hold the tick topic's row
// (false without a Redis call otherwise): from one page of the Schedulers' worker records
// (redisdelay.Inspector.Workers), a Scheduler runs while its record shows its subscription to
// the tick topic (its Run runs), as schedule.Info.Overdue counts them; a page with none that
// has more records after it counts as running, since the overview does not read on.
func (s *server) schedulersRunning(ctx context.Context, stats []redisdelay.GroupStats) (bool, error) {
	if !slices.ContainsFunc(stats, func(st redisdelay.GroupStats) bool { return st.Topic == schedule.TickTopic }) {
		return false, nil
	}
	page, err := s.in.Workers(ctx, redisdelay.WorkersOptions{Kind: redisdelay.WorkerScheduler, Limit: schedulerRecordsPage})
	ticks := redisdelay.WorkerSubscription{Topic: schedule.TickTopic, Group: schedule.TickGroup}
	running := page.NextCursor != "" || slices.ContainsFunc(page.Workers, func(w redisdelay.WorkerInfo) bool {
		return slices.Contains(w.Subscriptions, ticks)
	})
	return running, err
}

// writeTicksCell writes the delivery cell of the tick topic's row: "internal", with an overdue
// mark and the fix in words when ticks wait for a Scheduler. running is whether a Scheduler
// runs (see schedulersRunning); prefix is Options.Prefix.
func writeTicksCell(b *strings.Builder, st redisdelay.GroupStats, lv groupLevels, running bool, prefix string) {
	var v strings.Builder
	l := levelNone
	armed := st.Scheduled + st.Due + st.InFlight
	switch {
	case ticksOverdue(st):
		l = levelAlarm
		v.WriteString(`<span class="badge alarm" data-overdue="ticks">overdue</span> `)
		v.WriteString(html.EscapeString(plural(st.Due, "tick") + " due " + shortDuration(st.OldestDueAge) + " ago and not acted on: "))
		if running {
			v.WriteString(`a Scheduler is running but has not acted on them: check its logs for errors (see <a href="` + html.EscapeString(prefix+"/workers") + `">workers</a>).`)
		} else {
			v.WriteString("no Scheduler is running. " + startScheduler)
		}
	case st.Paused:
		l = lv.Paused
		v.WriteString(`<span class="badge ` + string(lv.Paused) + `">paused</span> Schedulers claim no tick until the group ` + schedule.TickGroup + ` is resumed`)
	case armed > 0 && !running:
		l = levelWarn
		v.WriteString("internal: the schedules' ticks; no Scheduler is running, so none will be acted on. ")
		v.WriteString(startScheduler)
	default:
		v.WriteString("internal: the schedules' ticks")
	}
	v.WriteString(` · <a href="` + html.EscapeString(prefix+"/schedules") + `">schedules</a>`)
	writeCell(b, "hint", "paused", l, v.String())
}

// startScheduler says how to start a Scheduler, in HTML.
const startScheduler = `Start one (<code>schedule.New</code>, then <code>Run</code>).`

// plural returns "n thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}
