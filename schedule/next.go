package schedule

// This file owns the tick times of a cron spec in a time zone: a bounded search over the fields
// robfig/cron/v3's parser fills in (cron.SpecSchedule), run on each stretch of constant UTC
// offset of the zone. robfig's own SpecSchedule.Next is not used for cron specs: it can loop
// forever on a day a zone skipped (Pacific/Apia on 2011-12-30), since its day step lands back
// on the day it started from.

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Horizon is how far ahead a schedule's next tick is searched: ten years of 365 days,
// longer than the longest gap between two ticks of any spec that ticks at all (a 29 February
// spec waits 8 years over 2100). A spec and time zone with no tick within Horizon
// after a given time have no next tick there: NextTicks and Backfill return an error wrapping
// ErrInvalid, and a Scheduler leaves the schedule without a pending tick. A spec
// without any tick at all ("0 0 30 2 *") is refused by Put. Each search visits at most one
// step per calendar day of the horizon, so it returns within milliseconds.
const Horizon = 10 * 365 * 24 * time.Hour

// starBit is robfig/cron's mark of a field written as "*" or "?" (cron.SpecSchedule).
const starBit = 1 << 63

// maxZoneStretches bounds the stretches of constant UTC offset one search steps through; no
// zone changes its offset that often within Horizon.
const maxZoneStretches = 10_000

// specTicks finds the ticks of a parsed cron spec in loc. With fixedHours (the hour field is
// not "*"), ticks are wall times: one skipped by a spring-forward gap fires at the gap's end,
// one that happens twice at a fall-back fires at its first instance. Otherwise every instant
// whose wall time matches the spec is a tick, so each real hour counts once.
type specTicks struct {
	spec       *cron.SpecSchedule
	loc        *time.Location
	fixedHours bool
}

// next returns the first tick after t, or false when there is none within Horizon.
func (s specTicks) next(t time.Time) (time.Time, bool) {
	cur := t.Truncate(time.Second).Add(time.Second)
	limit := t.Add(Horizon)
	for i := 0; i < maxZoneStretches && cur.Before(limit); i++ {
		start, end := cur.In(s.loc).ZoneBounds()
		_, off := cur.In(s.loc).Zone()
		hi := limit
		if !end.IsZero() && end.Before(hi) && end.After(cur) {
			hi = end
		}
		lo := cur
		if s.fixedHours && !start.IsZero() {
			_, before := start.Add(-time.Nanosecond).In(s.loc).Zone()
			shift := time.Duration(off-before) * time.Second
			if shift > 0 && cur.Equal(start) && s.wallTick(wall(start, before), wall(start, off)) {
				return start.In(s.loc), true // a tick skipped by the gap fires at its end
			}
			if repeatEnd := start.Add(-shift); shift < 0 && repeatEnd.After(lo) {
				lo = repeatEnd // these wall times happened before the fall-back
			}
		}
		if lo.Before(hi) {
			if w, ok := s.firstWall(wall(lo, off), wall(hi, off)); ok {
				return w.Add(-time.Duration(off) * time.Second).In(s.loc), true
			}
		}
		cur = hi
	}
	return time.Time{}, false
}

// wall returns instant t's wall time at offset off (seconds east of UTC), as a time in UTC.
func wall(t time.Time, off int) time.Time {
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// wallTick reports whether a wall time in [from, to) is a tick of the spec.
func (s specTicks) wallTick(from, to time.Time) bool {
	_, ok := s.firstWall(from, to)
	return ok
}

// firstWall returns the first wall time (a time in UTC, whole seconds) in [from, to) that the
// spec's fields match. It steps one calendar day at a time, a month at a time through months
// the spec does not name.
func (s specTicks) firstWall(from, to time.Time) (time.Time, bool) {
	if from.Nanosecond() != 0 {
		from = from.Truncate(time.Second).Add(time.Second)
	}
	day := time.Date(from.Year(), from.Month(), from.Day(), 0, 0, 0, 0, time.UTC)
	offset := from.Sub(day)
	for day.Before(to) {
		if s.spec.Month&(1<<uint(day.Month())) == 0 {
			day, offset = time.Date(day.Year(), day.Month()+1, 1, 0, 0, 0, 0, time.UTC), 0
			continue
		}
		if s.dayMatches(day) {
			if sec, ok := s.firstSecondOfDay(int(offset / time.Second)); ok {
				w := day.Add(time.Duration(sec) * time.Second)
				return w, w.Before(to)
			}
		}
		day, offset = day.AddDate(0, 0, 1), 0
	}
	return time.Time{}, false
}

// dayMatches applies robfig/cron's day rule: day of month and day of week must both match when
// either is "*", and either may match otherwise.
func (s specTicks) dayMatches(day time.Time) bool {
	dom := s.spec.Dom&(1<<uint(day.Day())) != 0
	dow := s.spec.Dow&(1<<uint(day.Weekday())) != 0
	if s.spec.Dom&starBit != 0 || s.spec.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// firstSecondOfDay returns the first second of the day, from the from-th on, that the spec's
// hour, minute and second fields match.
func (s specTicks) firstSecondOfDay(from int) (int, bool) {
	fh, fm, fs := from/3600, from/60%60, from%60
	for h := fh; h < 24; h++ {
		if s.spec.Hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if (h == fh && m < fm) || s.spec.Minute&(1<<uint(m)) == 0 {
				continue
			}
			for sec := 0; sec < 60; sec++ {
				if h == fh && m == fm && sec < fs {
					continue
				}
				if s.spec.Second&(1<<uint(sec)) != 0 {
					return h*3600 + m*60 + sec, true
				}
			}
		}
	}
	return 0, false
}

// checkTicksSomeDay returns an error when no calendar day matches the spec's month, day of
// month and day of week fields (30 February), so the spec never ticks.
func checkTicksSomeDay(spec *cron.SpecSchedule) error {
	if spec.Dom&starBit == 0 && spec.Dow&starBit == 0 {
		return nil // either field may match, and every month has every weekday
	}
	longest := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if spec.Month&(1<<uint(m)) == 0 {
			continue
		}
		for d := 1; d <= longest[m]; d++ {
			if spec.Dom&(1<<uint(d)) != 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("names no day that exists, so it never ticks")
}
