package store

import (
	"context"
	"fmt"
	"strconv"
)

// periodic.go owns the Redis side of periodic schedules: each schedule's state hash and the
// index of their names, kept in the hash slot of their tick topic, so that recording a tick and
// arming the next tick message is one script call (periodic_*.lua).

var (
	// periodicPutScript arms a first tick: like publishing, a full Redis refuses it.
	periodicPutScript     = mustScript(scriptSpec{file: "periodic_put"})
	periodicAdvanceScript = mustScript(scriptSpec{file: "periodic_advance"})
	periodicStateScript   = mustScript(scriptSpec{file: "periodic_state", allowOOM: true})
	periodicPauseScript   = mustScript(scriptSpec{file: "periodic_pause", allowOOM: true})
	periodicDeleteScript  = mustScript(scriptSpec{file: "periodic_delete", allowOOM: true})
	periodicListScript    = mustScript(scriptSpec{file: "periodic_list", allowOOM: true})
)

// ScheduleState is one periodic schedule's state hash as periodic_*.lua keep it, field ->
// value (see keys.go's layout), read with the Redis clock.
type ScheduleState struct {
	Name   string
	Fields map[string]string
}

// Exists reports whether the schedule exists.
func (st ScheduleState) Exists() bool { return len(st.Fields) > 0 }

// PutSchedule runs periodic_put.lua: it stores definition def of schedule name with version ver
// and, unless the definition is unchanged or the schedule paused, publishes first, the first
// tick message (nil: the spec has no future tick, whose nominal time firstMs is then ignored), to
// the tick partition for groups. atUs (Unix µs, the Redis clock) is the now the caller
// computed the first tick from: it is recorded as the schedule's created (new) or updated
// time, so that the first tick is the first after it. It returns "created", "updated" or
// "unchanged" and the version in force, or *StaleGroupsError with the current groups (nothing
// written).
func (s Store) PutSchedule(ctx context.Context, tick Partition, name, def, ver string, atUs, firstMs int64, first *Outgoing, call Call, groups []string) (string, string, error) {
	next := ""
	var msgs []Outgoing
	if first != nil {
		next, msgs = strconv.FormatInt(firstMs, 10), []Outgoing{*first}
	}
	cmd, nkeys := s.publishTarget(newCommand(0, s.keys.schedule(tick, name), s.keys.scheduleIndex(tick)), []any{name, def, ver, next, atUs}, tick, call, groups, msgs)
	res, err := s.eval(ctx, s.client, periodicPutScript, nkeys, cmd)
	if err != nil {
		return "", "", err
	}
	reply, _ := res.([]any)
	if len(reply) == 3 && asInt(reply[0]) == 1 {
		outcome, _ := reply[1].(string)
		version, _ := reply[2].(string)
		return outcome, version, nil
	}
	_, err = publishReply(periodicPutScript, res)
	if err == nil {
		err = unexpected(periodicPutScript, res)
	}
	return "", "", err
}

// Advance is what periodic_advance.lua records of a tick (see its header for each field).
type Advance struct {
	// Mode is AdvanceTick, AdvanceResume or AdvanceBuffer.
	Mode string
	// Version is the schedule's version the caller read.
	Version string
	// ExpectMs is the tick, Unix ms, that the state must still hold as next (AdvanceTick) or
	// buffered (AdvanceBuffer).
	ExpectMs int64
	// Next is the next tick, Unix ms, "" for none, KeepNext to keep it.
	Next string
	// LastMs and LastKey are the last published tick and its message key; LastMs 0 keeps them.
	LastMs  int64
	LastKey string
	// Outcome is recorded with the Redis clock's now when not "".
	Outcome string
	// Published and Skipped are added to the schedule's counts.
	Published, Skipped int
	// Buffered is the buffered tick to set (Unix ms), ClearBuffered, or "" to keep it.
	Buffered string
}

// The modes of periodic_advance.lua, and the values of Advance's Next and Buffered that keep or
// clear a field.
const (
	AdvanceTick   = "tick"
	AdvanceResume = "resume"
	AdvanceBuffer = "buffer"
	KeepNext      = "="
	ClearBuffered = "-"
)

// AdvanceSchedule runs periodic_advance.lua for schedule name: it records a, publishes msgs (the
// next tick message, a recheck message; none is fine) to the tick partition for groups, and
// reports whether it did; false means the call was stale (see periodic_advance.lua) and nothing
// was written. It returns *StaleGroupsError with the current groups (nothing written).
func (s Store) AdvanceSchedule(ctx context.Context, tick Partition, name string, a Advance, msgs []Outgoing, call Call, groups []string) (bool, error) {
	last := ""
	if a.LastMs > 0 {
		last = strconv.FormatInt(a.LastMs, 10)
	}
	args := []any{a.Mode, a.Version, strconv.FormatInt(a.ExpectMs, 10), a.Next, last, a.LastKey, a.Outcome, a.Published, a.Skipped, a.Buffered}
	cmd, nkeys := s.publishTarget(newCommand(0, s.keys.schedule(tick, name)), args, tick, call, groups, msgs)
	res, err := s.eval(ctx, s.client, periodicAdvanceScript, nkeys, cmd)
	if err != nil {
		return false, err
	}
	if reply, _ := res.([]any); len(reply) == 1 && asInt(reply[0]) == 2 {
		return false, nil
	}
	_, err = publishReply(periodicAdvanceScript, res)
	return err == nil, err
}

// ScheduleStates reads the state of the named schedules and the Redis clock (Unix µs) in one
// atomic view. A schedule that does not exist has no fields.
func (s Store) ScheduleStates(ctx context.Context, tick Partition, names ...string) ([]ScheduleState, int64, error) {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.keys.schedule(tick, n)
	}
	res, err := s.run(ctx, s.client, periodicStateScript, keys)
	if err != nil {
		return nil, 0, err
	}
	reply, _ := res.([]any)
	if len(reply) != 1+len(names) {
		return nil, 0, unexpected(periodicStateScript, res)
	}
	states := make([]ScheduleState, len(names))
	for i, n := range names {
		states[i] = ScheduleState{Name: n, Fields: fieldsOf(reply[1+i])}
	}
	return states, asInt(reply[0]), nil
}

// fieldsOf reads an HGETALL reply inside a script's reply: a flat list of fields and values.
func fieldsOf(v any) map[string]string {
	flat, _ := v.([]any)
	fields := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		fields[f] = val
	}
	return fields
}

// ListSchedules reads one page of at most limit schedules, in name order after the name after
// ("" from the first), with the Redis clock (Unix µs), and whether more follow.
func (s Store) ListSchedules(ctx context.Context, tick Partition, after string, limit int) ([]ScheduleState, int64, bool, error) {
	res, err := s.run(ctx, s.client, periodicListScript, []string{s.keys.scheduleIndex(tick), s.keys.schedule(tick, "")}, after, limit)
	if err != nil {
		return nil, 0, false, err
	}
	reply, _ := res.([]any)
	if len(reply) < 2 || len(reply)%2 != 0 {
		return nil, 0, false, unexpected(periodicListScript, res)
	}
	var states []ScheduleState
	for i := 2; i+1 < len(reply); i += 2 {
		name, _ := reply[i].(string)
		states = append(states, ScheduleState{Name: name, Fields: fieldsOf(reply[i+1])})
	}
	return states, asInt(reply[0]), asInt(reply[1]) == 1, nil
}

// PauseSchedule runs periodic_pause.lua. It returns 1 when it paused the schedule, with the
// version and the pending tick it made stale (Unix ms, or 0), 0 when it was paused already, -1
// when there is no such schedule.
func (s Store) PauseSchedule(ctx context.Context, tick Partition, name string) (int, string, int64, error) {
	res, err := s.run(ctx, s.client, periodicPauseScript, []string{s.keys.schedule(tick, name)})
	if err != nil {
		return 0, "", 0, err
	}
	return versionReply(periodicPauseScript, res)
}

// DeleteSchedule runs periodic_delete.lua. It returns 1 when it deleted the schedule, with the
// version and the pending tick it made stale (Unix ms, or 0), or 0 when there was none.
func (s Store) DeleteSchedule(ctx context.Context, tick Partition, name string) (int, string, int64, error) {
	res, err := s.run(ctx, s.client, periodicDeleteScript, []string{s.keys.schedule(tick, name), s.keys.scheduleIndex(tick)}, name)
	if err != nil {
		return 0, "", 0, err
	}
	return versionReply(periodicDeleteScript, res)
}

// versionReply reads {code} or {1, version, pending tick or ""}.
func versionReply(sc *script, res any) (int, string, int64, error) {
	reply, _ := res.([]any)
	switch {
	case len(reply) == 1:
		return int(asInt(reply[0])), "", 0, nil
	case len(reply) == 3:
		ver, _ := reply[1].(string)
		return int(asInt(reply[0])), ver, asInt(reply[2]), nil
	}
	return 0, "", 0, fmt.Errorf("script %s: unexpected reply %v", sc.name, res)
}
