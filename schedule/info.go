package schedule

// This file owns the Inspector's view of periodic schedules: Info, List (one page) and Get
// (one by name), read through a *redisdelay.Inspector.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultNextTicks is how many coming ticks Info.NextTicks holds.
const DefaultNextTicks = 5

// Info is a periodic schedule as the Inspector shows it. Times are absolute instants;
// those the state records were taken on the Redis clock.
type Info struct {
	// Schedule is its definition, defaults filled in.
	Schedule Schedule
	// Version is the token of its definition, new with each update.
	Version string
	// Paused is set while it is paused.
	Paused bool
	// Pending is the nominal time of its armed tick (zero when paused or the spec has no more).
	Pending time.Time
	// NextTicks are the next DefaultNextTicks nominal tick times after the Redis clock's now
	// (none while paused), as its spec and time zone give them.
	NextTicks []time.Time
	// LastTick is the nominal time of the last tick whose message was published, and LastKey
	// that message's key (zero, "" when none was).
	LastTick time.Time
	LastKey  string
	// LastOutcome is the outcome of the last tick acted on and LastOutcomeAt when it was
	// recorded ("", zero when none was).
	LastOutcome   TickOutcome
	LastOutcomeAt time.Time
	// Buffered is the nominal time of a tick held back by OverlapBufferOne (zero when none).
	Buffered time.Time
	// Published and Skipped count its ticks published and skipped (late, overlapping) since it
	// was created.
	Published, Skipped int64
	// Created and Updated are when it was created and last changed: the Redis clock's now
	// from which Put computed its first tick, or, updated, its next one, which is the first
	// after that time (the tick may have fallen due by the time Put stored the schedule).
	Created, Updated time.Time
	// Overdue is set when Pending fell due more than a lease ago on the Redis clock and no
	// Scheduler has acted on it: the lease is the longest LeaseTimeout of the running
	// Schedulers' worker records, DefaultLeaseTimeout when none runs (see
	// docs/schedules.md, "Overdue ticks"). OverdueReason then says why and what to do, in
	// words, such as "no Scheduler is running for key prefix ...: start one (schedule.New,
	// then Run)"; "" when not overdue.
	Overdue       bool
	OverdueReason string
}

// infoOf decodes a state hash read at the Redis clock's now.
func infoOf(st store.ScheduleState, now time.Time) (Info, error) {
	c, err := decodeSchedule(st.Name, st.Fields["def"])
	if err != nil {
		return Info{}, err
	}
	f := st.Fields
	info := Info{
		Schedule: c.Schedule, Version: f["ver"], Paused: f["paused"] == "1",
		Pending: msTime(f["next"]), LastTick: msTime(f["last"]), LastKey: f["last_key"],
		LastOutcome: TickOutcome(f["outcome"]), LastOutcomeAt: usTime(f["outcome_at"]), Buffered: msTime(f["buffered"]),
		Published: atoi64(f["published"]), Skipped: atoi64(f["skipped"]), Created: usTime(f["created"]), Updated: usTime(f["updated"]),
	}
	if !info.Paused {
		info.NextTicks, _ = c.nextTicks(now, DefaultNextTicks) // fewer when the spec has no more within Horizon
	}
	return info, nil
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// msTime reads Unix ms; "" is the zero time.
func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	return time.UnixMilli(atoi64(s))
}

// usTime reads Unix µs; "" is the zero time.
func usTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	return time.UnixMicro(atoi64(s))
}

var tickPartition = store.Partition{Topic: TickTopic}

// List returns one page of periodic schedules in name order, read through in (its Redis client
// and key prefix): at most limit (capped as redisdelay.ListOptions.Limit is) after the name
// after ("" from the first), and whether more follow. It reads one page in one script call,
// and when a pending tick is past due, one page of the Schedulers' worker records (see
// Info.Overdue), within in's OperationTimeout.
func List(ctx context.Context, in *redisdelay.Inspector, after string, limit int) ([]Info, bool, error) {
	i := seam.InspectorOf(in)
	ctx, cancel := context.WithTimeout(ctx, i.OperationTimeout())
	defer cancel()
	states, nowUs, more, err := i.Store().ListSchedules(ctx, tickPartition, after, i.ListLimit(limit))
	if err != nil {
		return nil, false, fmt.Errorf("schedule: list schedules: %w", err)
	}
	infos := make([]Info, 0, len(states))
	for _, st := range states {
		info, err := infoOf(st, time.UnixMicro(nowUs))
		if err != nil {
			return nil, false, err
		}
		infos = append(infos, info)
	}
	if err := markOverdue(ctx, in, infos, time.UnixMicro(nowUs)); err != nil {
		return nil, false, fmt.Errorf("schedule: list schedules: %w", err)
	}
	return infos, more, nil
}

// Get returns the periodic schedule name, read through in, or an error wrapping
// redisdelay.ErrNotFound; within in's OperationTimeout, in one script call and, when its
// pending tick is past due, one page of the Schedulers' worker records (see Info.Overdue).
func Get(ctx context.Context, in *redisdelay.Inspector, name string) (Info, error) {
	i := seam.InspectorOf(in)
	ctx, cancel := context.WithTimeout(ctx, i.OperationTimeout())
	defer cancel()
	states, nowUs, err := i.Store().ScheduleStates(ctx, tickPartition, name)
	if err != nil {
		return Info{}, fmt.Errorf("schedule: get schedule %s: %w", store.Quote(name), err)
	}
	if !states[0].Exists() {
		return Info{}, fmt.Errorf("schedule: get schedule %s: %w", store.Quote(name), redisdelay.ErrNotFound)
	}
	info, err := infoOf(states[0], time.UnixMicro(nowUs))
	if err != nil {
		return Info{}, err
	}
	infos := []Info{info}
	if err := markOverdue(ctx, in, infos, time.UnixMicro(nowUs)); err != nil {
		return Info{}, fmt.Errorf("schedule: get schedule %s: %w", store.Quote(name), err)
	}
	return infos[0], nil
}
