package redisdelay

// This file owns the Inspector's view of periodic schedules: ScheduleInfo, Schedules (one page)
// and Schedule (one by name).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultNextTicks is how many coming ticks ScheduleInfo.NextTicks holds.
const DefaultNextTicks = 5

// ScheduleInfo is a periodic schedule as the Inspector shows it. Times are absolute instants;
// those the state records were taken on the Redis clock.
type ScheduleInfo struct {
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
	LastOutcome   ScheduleOutcome
	LastOutcomeAt time.Time
	// Buffered is the nominal time of a tick held back by OverlapBufferOne (zero when none).
	Buffered time.Time
	// Published and Skipped count its ticks published and skipped (late, overlapping) since it
	// was created.
	Published, Skipped int64
	// Created and Updated are when it was created and last changed.
	Created, Updated time.Time
}

// scheduleInfo decodes a state hash read at the Redis clock's now.
func scheduleInfo(st store.ScheduleState, now time.Time) (ScheduleInfo, error) {
	c, err := decodeSchedule(st.Name, st.Fields["def"])
	if err != nil {
		return ScheduleInfo{}, err
	}
	f := st.Fields
	info := ScheduleInfo{
		Schedule: c.Schedule, Version: f["ver"], Paused: f["paused"] == "1",
		Pending: msTime(f["next"]), LastTick: msTime(f["last"]), LastKey: f["last_key"],
		LastOutcome: ScheduleOutcome(f["outcome"]), LastOutcomeAt: usTime(f["outcome_at"]), Buffered: msTime(f["buffered"]),
		Published: atoi64(f["published"]), Skipped: atoi64(f["skipped"]), Created: usTime(f["created"]), Updated: usTime(f["updated"]),
	}
	if !info.Paused {
		info.NextTicks, _ = c.nextTicks(now, DefaultNextTicks) // fewer when the spec has no more within ScheduleHorizon
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

var tickPartition = store.Partition{Topic: ScheduleTickTopic}

// Schedules returns one page of periodic schedules in name order: at most limit (capped as
// ListOptions.Limit is) after the name after ("" from the first), and whether more follow. It
// reads one page in one script call, within OperationTimeout.
func (i *Inspector) Schedules(ctx context.Context, after string, limit int) ([]ScheduleInfo, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	states, nowUs, more, err := i.store.ListSchedules(ctx, tickPartition, after, listLimit(limit))
	if err != nil {
		return nil, false, fmt.Errorf("redisdelay: list schedules: %w", err)
	}
	infos := make([]ScheduleInfo, 0, len(states))
	for _, st := range states {
		info, err := scheduleInfo(st, time.UnixMicro(nowUs))
		if err != nil {
			return nil, false, err
		}
		infos = append(infos, info)
	}
	return infos, more, nil
}

// Schedule returns the periodic schedule name, or an error wrapping ErrNotFound.
func (i *Inspector) Schedule(ctx context.Context, name string) (ScheduleInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	states, nowUs, err := i.store.ScheduleStates(ctx, tickPartition, name)
	if err != nil {
		return ScheduleInfo{}, fmt.Errorf("redisdelay: schedule %s: %w", quote(name), err)
	}
	if !states[0].Exists() {
		return ScheduleInfo{}, fmt.Errorf("redisdelay: schedule %s: %w", quote(name), ErrNotFound)
	}
	return scheduleInfo(states[0], time.UnixMicro(nowUs))
}
