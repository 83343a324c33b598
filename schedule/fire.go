package schedule

// This file owns what a Scheduler does with a tick that fell due: which ticks to publish
// (catch-up, overlap), publishing their messages through the Publisher's commit path (see
// internal/seam), and recording that while arming the next tick (periodic_advance.lua).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// the first tick after now (zero when the spec has no more).
func (c *compiledSchedule) dueTicks(tick, now time.Time) (publish []time.Time, skipped int, next time.Time) {
	cutoff := now.Add(-c.CatchUpWindow)
	t := tick
	for scanned := 0; !t.IsZero() && !t.After(now); scanned++ {
		if scanned == maxTickScan {
			return publish, skipped, c.next(now)
		}
		switch {
		case t.Before(cutoff):
			skipped++
		case c.CatchUp == CatchUpLatest && len(publish) == 1:
			publish[0] = t
			skipped++
		case len(publish) == MaxCatchUpTicks:
			skipped++
		default:
			publish = append(publish, t)
		}
		t = c.next(t)
	}
	return publish, skipped, t
}

// fence is the fence of the publishing calls of a tick whose state was read at now (Redis
// clock): OperationTimeout after it, the longest such a call may take.
func (s *Scheduler) fence(now time.Time) int64 {
	return now.Add(s.opTimeout).UnixMicro()
}

// prearmed reports whether the schedule's messages are stored ahead: with OverlapAllowAll
// nothing needs deciding at a tick, so the message of the next tick is published, due at its
// time, when the tick before it is acted on (or when the schedule is created or resumed), and
// its delivery is as precise as any delayed message's. The other policies decide at the tick.
func (c *compiledSchedule) prearmed() bool { return c.Overlap == OverlapAllowAll }

// fire acts on the schedule's pending tick, which fell due: it publishes the messages of the
// ticks due by now, as the catch-up and overlap policies allow, and arms the next tick (with a
// prearmed schedule, also storing its message ahead). resumed says that an earlier attempt at
// the tick was cut short (see Config.LeaseTimeout).
func (s *Scheduler) fire(ctx context.Context, st store.ScheduleState, c *compiledSchedule, tick, now time.Time, resumed bool) error {
	ver := st.Fields["ver"]
	a := store.Advance{Mode: store.AdvanceTick, Version: ver, ExpectMs: tick.UnixMilli(), Next: "", Outcome: string(TickSkippedLate)}
	// The ticks due by now whose messages are not stored yet: with a prearmed schedule, those
	// after the tick, whose message was stored ahead; resumed, the tick is owed and the
	// catch-up policy applies to those after it.
	from := tick
	if c.prearmed() || resumed {
		from = c.next(tick)
	}
	var publish []time.Time
	next := from
	if !from.IsZero() && !from.After(now) {
		publish, a.Skipped, next = c.dueTicks(from, now)
	}
	if resumed && !c.prearmed() {
		publish = c.owe(tick, now, publish, &a.Skipped)
	}
	jitter := c.jitter()
	var msgs []store.Outgoing
	if !next.IsZero() {
		m, err := s.tickOutgoing(c, ver, next, jitter)
		if err != nil {
			return err
		}
		msgs, a.Next = append(msgs, m), strconv.FormatInt(next.UnixMilli(), 10)
	}
	if c.prearmed() {
		return s.firePrearmed(ctx, c, a, msgs, tick, now, publish, next, jitter)
	}
	publish, msgs, err := s.overlap(ctx, st, c, &a, publish, msgs, now, resumed)
	if err != nil {
		return err
	}
	if len(publish) > 0 {
		if err := s.publishTicks(ctx, c, publish, nil, s.fence(now)); err != nil {
			return err
		}
		last := publish[len(publish)-1]
		a.LastMs, a.LastKey, a.Published, a.Outcome = last.UnixMilli(), TickKey(c.Name, last), len(publish), string(TickPublished)
	}
	_, err = s.advance(ctx, c.Name, a, msgs)
	return err
}

// owe puts tick, the tick of a resumed tick message, before the ticks due after it (publish),
// or counts it skipped when it is older than the catch-up window.
func (c *compiledSchedule) owe(tick, now time.Time, publish []time.Time, skipped *int) []time.Time {
	if tick.Before(now.Add(-c.CatchUpWindow)) {
		*skipped++
		return publish
	}
	return append([]time.Time{tick}, publish...)
}

// overlap applies the overlap policy (OverlapSkip or OverlapBufferOne) to the ticks due: one at
// most is published (the latest; the others overlap it), and none while the previous tick's
// message is held: skipped, or held back (a recheck message joins msgs). Resumed (see
// Config.LeaseTimeout), the ticks due are owed: all of them are published, unless the
// previous tick's message is held. It records its decision in a and returns the ticks to
// publish and the messages to arm.
func (s *Scheduler) overlap(ctx context.Context, st store.ScheduleState, c *compiledSchedule, a *store.Advance, publish []time.Time, msgs []store.Outgoing, now time.Time, resumed bool) ([]time.Time, []store.Outgoing, error) {
	if len(publish) == 0 {
		return nil, msgs, nil
	}
	if !resumed {
		a.Skipped += len(publish) - 1
		publish = publish[len(publish)-1:]
	}
	held, err := s.held(ctx, c, st.Fields["last_key"])
	if err == nil && held && resumed {
		// The attempt cut short published the first owed tick only if it found the previous
		// message finished; a finished message is held again only in a group registered since
		// (the new-group window). Its decision stands: what it published is counted.
		var published bool
		published, err = s.published(ctx, c, publish[0])
		held = !published
	}
	switch {
	case err != nil:
		return nil, nil, err
	case held && (c.Overlap == OverlapSkip || st.Fields["buffered"] != ""):
		a.Skipped, a.Outcome = a.Skipped+len(publish), string(TickSkippedOverlap)
		return nil, msgs, nil
	case held: // OverlapBufferOne, nothing held back yet: the first is, the others overlap it
		m, err := s.tickOutgoingAt(c.Name, a.Version, publish[0], now.Add(s.config.BufferRecheckInterval), tickKindBuffer)
		if err != nil {
			return nil, nil, err
		}
		a.Skipped += len(publish) - 1
		a.Buffered, a.Outcome = strconv.FormatInt(publish[0].UnixMilli(), 10), string(TickBuffered)
		return nil, append(msgs, m), nil
	}
	return publish, msgs, nil
}

// firePrearmed acts on a tick of a prearmed schedule: the tick's own message was stored ahead;
// it publishes it again while its key surely still guards it (a repair, should storing it ahead
// have failed; otherwise a Duplicate that stores nothing): when the call's fence (see fence)
// comes before TickKeyRetention after the tick (the key is taken until at least
// then, the message being finished no earlier than its tick). It also publishes the
// ticks missed since within the catch-up window (publish), and the next tick's message ahead,
// due at next plus jitter, all in one Publish; then it records the tick and arms the next.
func (s *Scheduler) firePrearmed(ctx context.Context, c *compiledSchedule, a store.Advance, msgs []store.Outgoing, tick, now time.Time, publish []time.Time, next time.Time, jitter time.Duration) error {
	var ticks, at []time.Time
	fence := s.fence(now)
	if fence < tick.Add(s.config.TickKeyRetention).UnixMicro() {
		ticks, at = append(ticks, tick), append(at, tick)
	}
	for _, t := range publish {
		ticks, at = append(ticks, t), append(at, t)
	}
	if !next.IsZero() {
		ticks, at = append(ticks, next), append(at, next.Add(jitter))
	}
	if err := s.publishTicks(ctx, c, ticks, at, fence); err != nil {
		return err
	}
	last := tick
	if len(publish) > 0 {
		last = publish[len(publish)-1]
	}
	a.LastMs, a.LastKey, a.Published, a.Outcome = last.UnixMilli(), TickKey(c.Name, last), 1+len(publish), string(TickPublished)
	_, err := s.advance(ctx, c.Name, a, msgs)
	return err
}

// publishTicks publishes the messages of ticks, each due at its time in at (nil: at once),
// one fenced script call per partition of the topic: a call that reaches Redis after
// notAfterUs (the Redis clock) stores nothing and fails with an error wrapping
// store.ErrTooLate. The fence is what keeps a call held up in the network from storing a tick
// again once its key no longer guards it (TickKeyRetention after the tick's message was
// finished): see Config.TickKeyRetention.
func (s *Scheduler) publishTicks(ctx context.Context, c *compiledSchedule, ticks, at []time.Time, notAfterUs int64) error {
	if len(ticks) == 0 {
		return nil
	}
	if at == nil {
		at = ticks
	}
	msgs := make([]*message.Message, len(ticks))
	for i, t := range ticks {
		msgs[i] = c.tickMessage(t, TickKey(c.Name, t))
	}
	if _, err := s.pub.Publish(ctx, c.Topic, msgs, s.tickOptions(at, notAfterUs)); err != nil {
		return fmt.Errorf("schedule: schedule %s: publish to topic %s: %w", store.Quote(c.Name), store.Quote(c.Topic), err)
	}
	return nil
}

// tickOptions are the per-call settings of a publish of tick messages (see seam.PublishOptions):
// due at their times in at (nil: at once), each key kept for TickKeyRetention (KeepExisting),
// fenced at notAfterUs (0: not fenced).
func (s *Scheduler) tickOptions(at []time.Time, notAfterUs int64) seam.PublishOptions {
	return seam.PublishOptions{At: at, KeyRetention: s.config.TickKeyRetention, NotAfterUs: notAfterUs}
}

// held reports whether the message with key, the previous tick's, is still due or in flight in
// some consumer group of the schedule's topic. No key (no tick published yet) is not held.
func (s *Scheduler) held(ctx context.Context, c *compiledSchedule, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	st, err := s.keyStatus(ctx, c, key)
	if err != nil {
		return false, err
	}
	for _, g := range st.Groups {
		if g.State == store.KeyDue || g.State == store.KeyLeased {
			return true, nil
		}
	}
	return false, nil
}

// published reports whether the message of tick was published: a message with its TickKey
// lives, or some group holds or remembers one (within TickKeyRetention of its end).
func (s *Scheduler) published(ctx context.Context, c *compiledSchedule, tick time.Time) (bool, error) {
	st, err := s.keyStatus(ctx, c, TickKey(c.Name, tick))
	if err != nil || st.Live {
		return st.Live, err
	}
	for _, g := range st.Groups {
		if g.State != store.KeyUnknown {
			return true, nil
		}
	}
	return false, nil
}

// keyStatus reads where each consumer group of the schedule's topic stands with the message of
// key.
func (s *Scheduler) keyStatus(ctx context.Context, c *compiledSchedule, key string) (store.KeyStatus, error) {
	part := store.Partition{Topic: c.Topic, N: s.pub.KeyPartition(key)}
	groups, err := s.store.Groups(ctx, part)
	if err != nil {
		return store.KeyStatus{}, err
	}
	return s.store.Status(ctx, part, key, groups)
}

// publishBuffered publishes the tick held back by OverlapBufferOne once its predecessor is
// finished; while it is held, it returns *predecessorHeld, so the recheck is retried.
func (s *Scheduler) publishBuffered(ctx context.Context, st store.ScheduleState, c *compiledSchedule, tp tickPayload, now time.Time) error {
	if st.Fields["buffered"] != strconv.FormatInt(tp.Tick, 10) {
		return nil // published, or dropped by a pause or an update: stale
	}
	held, err := s.held(ctx, c, st.Fields["last_key"])
	if err != nil {
		return err
	}
	if held {
		return &predecessorHeld{}
	}
	tick := time.UnixMilli(tp.Tick)
	if err := s.publishTicks(ctx, c, []time.Time{tick}, nil, s.fence(now)); err != nil {
		return err
	}
	a := store.Advance{
		Mode: store.AdvanceBuffer, Version: st.Fields["ver"], ExpectMs: tp.Tick, Next: store.KeepNext,
		LastMs: tp.Tick, LastKey: TickKey(c.Name, tick), Outcome: string(TickPublishedBuffered), Published: 1, Buffered: store.ClearBuffered,
	}
	_, err = s.advance(ctx, c.Name, a, nil)
	return err
}
