package schedule

// This file owns the calls that create and change schedules: Put, Pause, Resume, Delete, and
// what they share (reading a schedule's state, arming its next tick, dropping a stale one).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// PutOutcome is what Put did with a schedule.
type PutOutcome string

const (
	// Created: there was no schedule of that name; it was stored and its first tick armed.
	Created PutOutcome = "created"
	// Updated: the schedule's definition changed; the new one is stored and the next tick
	// recomputed from the Redis clock's now (the pending tick of the old one is dropped).
	Updated PutOutcome = "updated"
	// Unchanged: the stored definition is the same; nothing changed.
	Unchanged PutOutcome = "unchanged"
)

// Put creates the schedule, or updates it when its definition differs from the stored one
// (its first tick then recomputed after the Redis clock's now); an equal definition is left as
// it is. A paused schedule stays paused. It returns an error wrapping ErrInvalid that names the
// schedule and the field for a bad definition (nothing stored), ErrClosed after Close, or the
// Redis error; within the Publisher's OperationTimeout (two calls).
func (s *Scheduler) Put(ctx context.Context, sch Schedule) (PutOutcome, error) {
	c, err := s.check(sch)
	if err != nil {
		return "", err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, nowUs, err := s.store.ScheduleStates(ctx, s.tickPart, c.Name)
	if err != nil {
		return "", s.errorf("put", c.Name, err)
	}
	def := c.encode()
	if states[0].Fields["def"] == def {
		return Unchanged, nil
	}
	ver := store.NewToken()
	first, jitter := c.next(time.UnixMicro(nowUs)), c.jitter()
	var firstMsg *store.Outgoing
	if !first.IsZero() {
		m, err := s.tickOutgoing(c, ver, first, jitter)
		if err != nil {
			return "", err
		}
		firstMsg = &m
	}
	var outcome string
	err = s.withTickGroups(ctx, func(ctx context.Context, groups []string) (err error) {
		outcome, _, err = s.store.PutSchedule(ctx, s.tickPart, c.Name, def, ver, nowUs, first.UnixMilli(), firstMsg, s.pub.Call(), groups)
		return err
	})
	if err != nil {
		return "", s.errorf("put", c.Name, err)
	}
	if old := states[0]; outcome == string(Updated) && old.Fields["next"] != "" {
		s.dropTick(ctx, old)
	}
	if err := s.pub.EnsureTopic(ctx, TickTopic, 1, s.logger); err != nil {
		return PutOutcome(outcome), s.errorf("put", c.Name, err)
	}
	if outcome != string(Unchanged) && states[0].Fields["paused"] != "1" {
		if err := s.storeAhead(ctx, c, first, jitter, time.UnixMicro(nowUs)); err != nil {
			return PutOutcome(outcome), s.errorf("put", c.Name, err)
		}
	}
	return PutOutcome(outcome), nil
}

// check compiles sch and checks that its message can be published (reserved metadata, size).
func (s *Scheduler) check(sch Schedule) (*compiledSchedule, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	c, err := sch.compile()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := s.pub.Check(c.Topic, c.tickMessage(now, TickKey(c.Name, now))); err != nil {
		return nil, fmt.Errorf("schedule: %w %s: %w", ErrInvalid, store.Quote(c.Name), err)
	}
	return c, nil
}

// storeAhead stores the message of a prearmed schedule's tick at first, armed at now (Redis
// clock), due jitter after it. Should it fail, the tick publishes the message when it falls
// due; the error says so.
func (s *Scheduler) storeAhead(ctx context.Context, c *compiledSchedule, first time.Time, jitter time.Duration, now time.Time) error {
	if first.IsZero() || !c.prearmed() {
		return nil
	}
	if err := s.publishTicks(ctx, c, []time.Time{first}, []time.Time{first.Add(jitter)}, s.fence(now)); err != nil {
		return fmt.Errorf("stored, but the message of its tick %s not yet (the tick publishes it at its time): %w", first.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// dropTick cancels what a state's pending tick had stored ahead, once an update, a pause or a
// deletion made it stale: its tick message, and with a prearmed definition the tick's message
// on its topic. It is cleanup: a stale tick message that is not cancelled is dropped when it
// falls due; a message stored ahead that is not cancelled is delivered, and the failure is
// logged.
func (s *Scheduler) dropTick(ctx context.Context, st store.ScheduleState) {
	name, pending := st.Name, st.Fields["next"]
	key := tickMessageKey(name, st.Fields["ver"], pending)
	err := s.withTickGroups(ctx, func(ctx context.Context, groups []string) error {
		_, err := s.store.Cancel(ctx, s.tickPart, key, s.pub.Call(), groups)
		return err
	})
	if err != nil {
		s.logger.Debug("Could not cancel a stale tick message; it is dropped when it falls due", watermill.LogFields{"schedule": name, "key": key, "err": err.Error()})
	}
	c, err := decodeSchedule(name, st.Fields["def"])
	if err != nil || !c.prearmed() {
		return
	}
	key = TickKey(name, msTime(pending))
	part := store.Partition{Topic: c.Topic, N: s.pub.KeyPartition(key)}
	var res store.KeyResult
	err = s.pub.WithGroups(ctx, part, func(ctx context.Context, groups []string) (err error) {
		res, err = s.store.Cancel(ctx, part, key, s.pub.Call(), groups)
		return err
	})
	if err != nil {
		s.logger.Error("Could not cancel the message a schedule stored ahead; it is delivered at its time", err, watermill.LogFields{"schedule": name, "topic": c.Topic, "key": key})
		return
	}
	// A message cancelled while it waited everywhere never happened: free its key, so that the
	// tick armed again at the same instant (Resume, an update that keeps the next tick, Delete
	// and Put) stores its message. One that some group holds in flight or has finished did
	// happen (a Scheduler acting on its tick may even be publishing it again): its key stays
	// taken.
	waited := res.Parked == store.Applied || slices.Contains(res.Groups, store.Applied)
	if !waited || slices.Contains(res.Groups, store.InFlight) || slices.Contains(res.Groups, store.Finished) {
		return
	}
	if _, err := s.store.ForgetKey(ctx, part, key); err != nil {
		s.logger.Error("Could not free the key of a cancelled message stored ahead; the tick armed again at its instant is stored once the key's retention ends", err, watermill.LogFields{"schedule": name, "topic": c.Topic, "key": key})
	}
}

// Delete deletes the schedule: no tick of it is published after Delete returns, save one under
// way at that moment on some Scheduler. It returns an error wrapping redisdelay.ErrNotFound
// when there is no such schedule, or the Redis error; within the Publisher's OperationTimeout.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, _, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return s.errorf("delete", name, err)
	}
	code, _, pending, err := s.store.DeleteSchedule(ctx, s.tickPart, name)
	switch {
	case err != nil:
		return s.errorf("delete", name, err)
	case code == 0:
		return s.errorf("delete", name, redisdelay.ErrNotFound)
	}
	if pending > 0 {
		s.dropTick(ctx, states[0])
	}
	return nil
}

// Pause pauses the schedule: no tick falls due while it is paused, and the ticks of the pause
// are not caught up on Resume. It reports whether it changed anything (false: paused
// already), or returns an error wrapping redisdelay.ErrNotFound, or the Redis error; within
// OperationTimeout.
func (s *Scheduler) Pause(ctx context.Context, name string) (bool, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, _, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return false, s.errorf("pause", name, err)
	}
	code, _, pending, err := s.store.PauseSchedule(ctx, s.tickPart, name)
	switch {
	case err != nil:
		return false, s.errorf("pause", name, err)
	case code < 0:
		return false, s.errorf("pause", name, redisdelay.ErrNotFound)
	}
	if pending > 0 {
		s.dropTick(ctx, states[0])
	}
	return code == 1, nil
}

// Resume resumes a paused schedule: its next tick is the first after the Redis clock's now. It
// reports whether it changed anything (false: not paused), or returns an error wrapping
// redisdelay.ErrNotFound, or the Redis error; within the Publisher's OperationTimeout.
func (s *Scheduler) Resume(ctx context.Context, name string) (bool, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	st, c, now, err := s.read(ctx, name)
	if err != nil {
		return false, s.errorf("resume", name, err)
	}
	if st.Fields["paused"] != "1" {
		return false, nil
	}
	next, jitter := c.next(now), c.jitter()
	var msgs []store.Outgoing
	a := store.Advance{Mode: store.AdvanceResume, Version: st.Fields["ver"], Next: ""}
	if !next.IsZero() {
		m, err := s.tickOutgoing(c, a.Version, next, jitter)
		if err != nil {
			return false, err
		}
		msgs, a.Next = []store.Outgoing{m}, fmt.Sprint(next.UnixMilli())
	}
	done, err := s.advance(ctx, name, a, msgs)
	if err != nil {
		return false, s.errorf("resume", name, err)
	}
	if done {
		if err := s.storeAhead(ctx, c, next, jitter, now); err != nil {
			return true, s.errorf("resume", name, err)
		}
	}
	return done, nil
}

// read returns schedule name's state, its compiled definition and the Redis clock's now, or an
// error wrapping redisdelay.ErrNotFound.
func (s *Scheduler) read(ctx context.Context, name string) (store.ScheduleState, *compiledSchedule, time.Time, error) {
	states, nowUs, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return store.ScheduleState{}, nil, time.Time{}, err
	}
	st := states[0]
	if !st.Exists() {
		return st, nil, time.Time{}, redisdelay.ErrNotFound
	}
	c, err := s.compiledOf(st)
	return st, c, time.UnixMicro(nowUs), err
}

// compiledOf returns the compiled definition of a state, cached by version.
func (s *Scheduler) compiledOf(st store.ScheduleState) (*compiledSchedule, error) {
	ver := st.Fields["ver"]
	if c, ok := s.compiled.Load(ver); ok {
		return c.(*compiledSchedule), nil
	}
	c, err := decodeSchedule(st.Name, st.Fields["def"])
	if err != nil {
		return nil, err
	}
	if s.compiledCount.Add(1) > maxCompiled {
		s.compiled.Clear()
		s.compiledCount.Store(1)
	}
	s.compiled.Store(ver, c)
	return c, nil
}

// advance runs periodic_advance.lua with the tick topic's groups.
func (s *Scheduler) advance(ctx context.Context, name string, a store.Advance, msgs []store.Outgoing) (bool, error) {
	var done bool
	err := s.withTickGroups(ctx, func(ctx context.Context, groups []string) (err error) {
		done, err = s.store.AdvanceSchedule(ctx, s.tickPart, name, a, msgs, s.pub.Call(), groups)
		return err
	})
	return done, err
}
