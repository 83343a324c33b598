package schedule_test

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// watchdog is how long one tick computation may take before the test counts it as hung.
const watchdog = time.Second

// nextTicksWithin runs NextTicks and fails the test when it does not return within watchdog:
// a computation that loops forever is an outcome, not a timeout of the whole test binary.
func nextTicksWithin(t *testing.T, s schedule.Schedule, from time.Time, n int) ([]time.Time, error, time.Duration) {
	t.Helper()
	type result struct {
		ticks []time.Time
		err   error
		took  time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		ticks, err := s.NextTicks(from, n)
		done <- result{ticks, err, time.Since(start)}
	}()
	select {
	case r := <-done:
		return r.ticks, r.err, r.took
	case <-time.After(watchdog):
		t.Fatalf("NextTicks(%s in %s, from %s) did not return within %s", s.Spec, s.TimeZone, from.Format(time.RFC3339), watchdog)
		return nil, nil, 0
	}
}

func TestNextTicksReturnsOnTheDaySamoaSkipped(t *testing.T) {
	s := schedule.Schedule{Name: "nye", Spec: "59 23 31 12 *", TimeZone: "Pacific/Apia", Topic: "t"}
	ticks, err, _ := nextTicksWithin(t, s, utc("2011-01-01T00:00:00Z"), 3)
	require.NoError(t, err)
	// Apia was UTC-10 until 29 December 2011 and UTC+14 from 31 December 2011 on.
	assert.Equal(t, []string{"2011-01-01T09:59:00Z", "2011-12-31T09:59:00Z", "2012-12-31T09:59:00Z"}, utcStrings(ticks))
}

// hardSpecs are the specs of the zone sweep: month ends, 29 February, a daily time inside
// most spring-forward gaps and every 31st.
var hardSpecs = []string{"59 23 31 12 *", "0 0 29 2 *", "30 2 * * *", "0 0 31 * *"}

// TestNextTicksIsBoundedInEveryZone runs each hard spec in every IANA zone of this machine
// from 1970, 2011 and now: each call returns within the watchdog, with ticks in order whose
// wall time is the spec's (or, for a wall time a zone skipped, the end of the gap).
func TestNextTicksIsBoundedInEveryZone(t *testing.T) {
	zones := ianaZones(t)
	starts := []time.Time{utc("1970-01-01T00:00:00Z"), utc("2011-01-01T00:00:00Z"), time.Now()}
	var slowest time.Duration
	var slowestCall string
	calls := 0
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		for _, spec := range hardSpecs {
			for _, from := range starts {
				s := schedule.Schedule{Name: "sweep", Spec: spec, TimeZone: zone, Topic: "t"}
				ticks, err, took := nextTicksWithin(t, s, from, 3)
				calls++
				if took > slowest {
					slowest, slowestCall = took, spec+" in "+zone+" from "+from.Format(time.RFC3339)
				}
				require.NoError(t, err, "%s in %s from %s", spec, zone, from)
				require.Len(t, ticks, 3)
				assertTicksOfSpec(t, spec, loc, from, ticks)
			}
		}
	}
	t.Logf("%d zones, %d calls; slowest %s: %s", len(zones), calls, slowestCall, slowest)
}

// assertTicksOfSpec checks that ticks rise after from and that each one's wall time in loc
// matches spec, or is the end of a gap (the instant the zone's offset changed).
func assertTicksOfSpec(t *testing.T, spec string, loc *time.Location, from time.Time, ticks []time.Time) {
	t.Helper()
	sched, err := cron.ParseStandard(spec)
	require.NoError(t, err)
	prev := from
	for _, tick := range ticks {
		require.True(t, tick.After(prev), "%s in %s: tick %s not after %s", spec, loc, tick, prev)
		prev = tick
		local := tick.In(loc)
		wallUTC := time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), local.Minute(), local.Second(), 0, time.UTC)
		matches := sched.Next(wallUTC.Add(-time.Second)).Equal(wallUTC)
		start, _ := local.ZoneBounds()
		require.True(t, matches || start.Equal(tick), "%s in %s: tick %s (%s) is neither the spec's wall time nor a gap's end", spec, loc, tick.UTC(), local)
	}
}

// ianaZones lists the zones under /usr/share/zoneinfo that the Go runtime loads (not the
// posix/ and right/ copies).
func ianaZones(t *testing.T) []string {
	const root = "/usr/share/zoneinfo"
	var zones []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path, root+"/")
		if d.IsDir() && (name == "posix" || name == "right") {
			return filepath.SkipDir
		}
		if d.IsDir() || !d.Type().IsRegular() && d.Type()&os.ModeSymlink == 0 {
			return nil
		}
		if _, err := time.LoadLocation(name); err == nil && name != "localtime" {
			zones = append(zones, name)
		}
		return nil
	})
	if os.IsNotExist(err) {
		t.Skip("no " + root + " on this machine")
	}
	require.NoError(t, err)
	require.NotEmpty(t, zones)
	return zones
}

// TestNextTicksMatchRobfigCronInUTC compares the bounded search with robfig/cron's own Next
// where that one is right, in UTC (no offset changes), over random specs and start times.
func TestNextTicksMatchRobfigCronInUTC(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 4))
	fields := [][]string{
		{"*", "0", "*/7", "5,35", "59"},
		{"*", "0", "*/5", "1-3", "23"},
		{"*", "1", "15", "29", "31", "L"},
		{"*", "2", "*/3", "12", "1,7"},
		{"*", "0", "1-5", "6"},
	}
	for i := 0; i < 2000; i++ {
		var parts []string
		for _, f := range fields {
			parts = append(parts, f[rng.IntN(len(f))])
		}
		spec := strings.Join(parts, " ")
		if strings.Contains(spec, "L") {
			continue
		}
		want, err := cron.ParseStandard(spec)
		require.NoError(t, err)
		from := time.Unix(rng.Int64N(4_000_000_000), 0).UTC()
		got, err, _ := nextTicksWithin(t, schedule.Schedule{Name: "utc", Spec: spec, Topic: "t"}, from, 3)
		var expect []time.Time
		for t := from; len(expect) < 3; {
			t = want.Next(t)
			if t.IsZero() {
				break
			}
			expect = append(expect, t)
		}
		if len(expect) < 3 { // robfig gives up after 5 years; the horizon is 10
			continue
		}
		require.NoError(t, err, spec)
		assert.Equal(t, utcStrings(expect), utcStrings(got), "%s from %s", spec, from)
	}
}

func TestScheduleWithoutAnyTickOrBeyondTheHorizonIsRefused(t *testing.T) {
	for _, spec := range []string{"0 0 30 2 *", "0 0 31 4,6,9,11 *"} {
		_, err := schedule.Schedule{Name: "never", Spec: spec, Topic: "t"}.NextTicks(time.Now(), 1)
		require.ErrorIs(t, err, schedule.ErrInvalid, spec)
		assert.Contains(t, err.Error(), spec)
	}
	// 29 February 2096, then 2104 (2100 is no leap year): within the horizon of 10 years.
	ticks, err := schedule.Schedule{Name: "leap", Spec: "0 0 29 2 *", Topic: "t"}.NextTicks(utc("2096-03-01T00:00:00Z"), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"2104-02-29T00:00:00Z"}, utcStrings(ticks))
}

// TestNextTickIsTheFirstInstantTheRulesName checks NextTicks minute by minute against the
// rules of Schedule.TimeZone, written as a predicate on each instant: with hours named, an
// instant is a tick when its wall time matches the spec and happened for the first time, or
// when it ends a gap that skipped a matching wall time; with hour "*", when its wall time
// matches. Zones with 30-minute (Lord Howe), 45-minute offsets (Chatham), 2-hour shifts (Troll),
// midnight gaps (Havana, Sao Paulo, Gaza) and a skipped day (Apia).
func TestNextTickIsTheFirstInstantTheRulesName(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 5))
	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Antarctica/Troll", "America/Havana", "America/Sao_Paulo", "Asia/Gaza", "Asia/Tehran", "Pacific/Apia", "Africa/Casablanca"}
	minutes := []string{"0", "30", "*/15", "45", "5,50"}
	dows := []string{"*", "*", "0", "1-5"}
	atTransition := 0
	for i := 0; i < 400; i++ {
		zone := zones[rng.IntN(len(zones))]
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		// Start within two days before one of the zone's offset changes, with a spec whose
		// hour is the wall hour the change skips or repeats (or any hour).
		from := time.Unix(1_100_000_000+rng.Int64N(800_000_000), 0)
		_, change := from.In(loc).ZoneBounds()
		hours := []string{"*", "1-3", "0,12"}
		if !change.IsZero() {
			from = change.Add(-time.Duration(rng.Int64N(48*3600)) * time.Second)
			_, before := change.Add(-time.Second).In(loc).Zone()
			_, after := change.In(loc).Zone()
			hours = append(hours, fmt.Sprint(wall(change, before).Hour()), fmt.Sprint(wall(change, after).Hour()))
		}
		spec := minutes[rng.IntN(len(minutes))] + " " + hours[rng.IntN(len(hours))] + " * * " + dows[rng.IntN(len(dows))]
		sched, err := cron.ParseStandard(spec)
		require.NoError(t, err)
		ticks, err, _ := nextTicksWithin(t, schedule.Schedule{Name: "rules", Spec: spec, TimeZone: zone, Topic: "t"}, from, 1)
		require.NoError(t, err)
		fixedHours := !strings.HasPrefix(strings.Fields(spec)[1], "*")
		m := from.Truncate(time.Minute).Add(time.Minute)
		for ; !isTickByRules(sched, loc, m, fixedHours); m = m.Add(time.Minute) {
			require.True(t, m.Before(ticks[0]), "%s in %s from %s: the rules name no tick before NextTicks' %s, nor at it", spec, zone, from, ticks[0])
		}
		require.Equal(t, m.UTC(), ticks[0].UTC(), "%s in %s from %s", spec, zone, from.In(loc))
		if start, _ := ticks[0].In(loc).ZoneBounds(); start.Equal(ticks[0]) {
			atTransition++
		}
	}
	t.Logf("%d of the first ticks fell on an offset change", atTransition)
	assert.Positive(t, atTransition, "the cases reach offset changes")
}

// wall returns instant t's wall time at offset off (seconds east of UTC), as a time in UTC.
func wall(t time.Time, off int) time.Time {
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// isTickByRules is the rule of Schedule.TimeZone for instant m (whole minutes).
func isTickByRules(sched cron.Schedule, loc *time.Location, m time.Time, fixedHours bool) bool {
	local := m.In(loc)
	_, off := local.Zone()
	matches := wallMatches(sched, local, off)
	if !fixedHours {
		return matches
	}
	start, _ := local.ZoneBounds()
	if start.IsZero() {
		return matches
	}
	_, before := start.Add(-time.Second).In(loc).Zone()
	shift := time.Duration(off-before) * time.Second
	if shift < 0 && m.Before(start.Add(-shift)) {
		return false // the wall time happened before the fall-back
	}
	if shift > 0 && m.Equal(start) {
		for w := start; w.Before(start.Add(shift)); w = w.Add(time.Minute) {
			if wallMatches(sched, w, before) { // the skipped wall times, read at the old offset
				return true
			}
		}
	}
	return matches
}

// wallMatches reports whether the wall time of t at offset off matches sched (read in UTC,
// where robfig/cron is right).
func wallMatches(sched cron.Schedule, t time.Time, off int) bool {
	w := wall(t, off).Truncate(time.Second)
	return sched.Next(w.Add(-time.Second)).Equal(w)
}
