package redisdelay

// This file owns what a Scheduler does with one tick message: reading the schedule's state,
// deciding which ticks to publish (catch-up, overlap), publishing their messages and recording
// that while arming the next tick (periodic_advance.lua).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// ScheduleOutcome is the outcome of a schedule's last tick, as the Inspector shows it.
type ScheduleOutcome string

const (
	// TickPublished: the tick's message was published (with catch-up, one or more ticks').
	TickPublished ScheduleOutcome = "published"
	// TickSkippedOverlap: the tick was skipped because the previous tick's message was still
	// held (OverlapSkip, or OverlapBufferOne with a tick held back already).
	TickSkippedOverlap ScheduleOutcome = "skipped-overlap"
	// TickSkippedLate: the tick was later than the catch-up window, or not the latest with
	// CatchUpLatest, and was skipped.
	TickSkippedLate ScheduleOutcome = "skipped-late"
	// TickBuffered: the tick is held back until the previous tick's message is finished
	// (OverlapBufferOne).
	TickBuffered ScheduleOutcome = "buffered"
	// TickPublishedBuffered: a tick held back was published once its predecessor finished.
	TickPublishedBuffered ScheduleOutcome = "published-buffered"
)

// The kinds of tick message.
const (
	tickKindTick   = "tick"   // a tick of the spec
	tickKindBuffer = "buffer" // the recheck of a tick held back by OverlapBufferOne
)

// tickPayload is the payload of a tick message, JSON.
type tickPayload struct {
	Name    string `json:"name"`
	Version string `json:"ver"`
	Tick    int64  `json:"tick_ms"`
	Kind    string `json:"kind"`
}

// tickMessageKey is the key of a tick message on ScheduleTickTopic: unique per schedule
// version and tick, so that arming a tick twice stores it once.
func tickMessageKey(name, ver, tickMs string) string {
	return name + "@" + ver + "." + tickMs
}

// jitter draws a tick's jitter: from 0 to Jitter, in whole ms.
func (c *compiledSchedule) jitter() time.Duration {
	if c.Jitter <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(c.Jitter/time.Millisecond)+1)) * time.Millisecond
}

// tickMessage is the message of the tick at nominal time tick, with message key key.
func (c *compiledSchedule) tickMessage(tick time.Time, key string) *message.Message {
	md := make(message.Metadata, len(c.Metadata)+4)
	for k, v := range c.Metadata {
		md[k] = v
	}
	md[ScheduleMetadataKey] = c.Name
	md[TickTimeMetadataKey] = tick.UTC().Format(time.RFC3339Nano)
	md[KeyMetadataKey] = key
	md[OnDuplicateMetadataKey] = string(KeepExisting)
	msg := message.NewMessage(watermill.NewUUID(), append(message.Payload(nil), c.Payload...))
	msg.Metadata = md
	return msg
}

// prearmedTickDelay is how long after its message a prearmed schedule's tick message falls
// due: the message, stored ahead, is delivered at its time without a Scheduler, and the
// Schedulers' work for the tick (recording it, arming the next) does not compete with that
// delivery for the machine at the same instant.
const prearmedTickDelay = 10 * time.Millisecond

// tickOutgoing prepares the tick message of c's version ver for the tick at nominal time tick,
// due jitter after it (and prearmedTickDelay more for a prearmed schedule).
func (s *Scheduler) tickOutgoing(c *compiledSchedule, ver string, tick time.Time, jitter time.Duration) (store.Outgoing, error) {
	due := tick.Add(jitter)
	if c.prearmed() {
		due = due.Add(prearmedTickDelay)
	}
	return s.tickOutgoingAt(c.Name, ver, tick, due, tickKindTick)
}

// tickOutgoingAt prepares a tick message due at due.
func (s *Scheduler) tickOutgoingAt(name, ver string, tick, due time.Time, kind string) (store.Outgoing, error) {
	payload, _ := json.Marshal(tickPayload{Name: name, Version: ver, Tick: tick.UnixMilli(), Kind: kind})
	ms := strconv.FormatInt(tick.UnixMilli(), 10)
	key := tickMessageKey(name, ver, ms)
	if kind == tickKindBuffer {
		key += ".buffer"
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	data, err := s.publisher.marshalOutgoing(ScheduleTickTopic, msg)
	if err != nil {
		return store.Outgoing{}, err
	}
	return store.Outgoing{Data: data, At: due, KeySpec: store.KeySpec(store.KeepExisting, 0, 0, key)}, nil
}

// act acts on one tick message and acks it, or nacks it (retried after
// BufferRecheckInterval) when it could not be acted on.
func (s *Scheduler) act(ctx context.Context, msg *message.Message) {
	var tp tickPayload
	if err := json.Unmarshal(msg.Payload, &tp); err != nil || tp.Name == "" {
		s.logger.Error("Dropping an unreadable tick message", err, watermill.LogFields{"message_uuid": msg.UUID})
		msg.Ack()
		return
	}
	fields := watermill.LogFields{"schedule": tp.Name, "tick": time.UnixMilli(tp.Tick).UTC()}
	// A later attempt means that an earlier one was cut short: its Scheduler died, was cut off
	// from Redis or failed (see SchedulerConfig.LeaseTimeout).
	attempt, _ := strconv.Atoi(msg.Metadata.Get(AttemptMetadataKey))
	// A tick under way is finished even when Run is stopping (bounded by OperationTimeout).
	err := s.actOn(context.WithoutCancel(ctx), tp, attempt > 1)
	var wait *predecessorHeld
	switch {
	case errors.As(err, &wait):
		s.logger.Trace("Tick held back: the previous tick's message is still held", fields)
		msg.Nack()
	case err != nil:
		s.logger.Error("Tick not acted on; retrying", err, fields)
		msg.Nack()
	default:
		msg.Ack()
	}
}

// predecessorHeld is actOn's error for a buffered tick whose predecessor is still held.
type predecessorHeld struct{}

func (predecessorHeld) Error() string { return "the previous tick's message is still held" }

// actOn reads the schedule's state and acts on tick message tp: nothing when it is stale.
// resumed says that an earlier attempt at it was cut short.
func (s *Scheduler) actOn(ctx context.Context, tp tickPayload, resumed bool) error {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, nowUs, err := s.store.ScheduleStates(ctx, s.tickPart, tp.Name)
	if err != nil {
		return err
	}
	st := states[0]
	if !st.Exists() || st.Fields["ver"] != tp.Version {
		return nil // deleted or changed since: stale
	}
	c, err := s.compiledOf(st)
	if err != nil {
		return err
	}
	now := time.UnixMicro(nowUs)
	if tp.Kind == tickKindBuffer {
		return s.publishBuffered(ctx, st, c, tp, now)
	}
	if st.Fields["next"] != strconv.FormatInt(tp.Tick, 10) {
		return nil // moved past, paused or a second delivery: stale
	}
	return s.fire(ctx, st, c, time.UnixMilli(tp.Tick), now, resumed)
}

// dueTicks returns the ticks from tick to now to publish, how many were skipped as late, and
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
	return now.Add(s.config.OperationTimeout).UnixMicro()
}

// prearmed reports whether the schedule's messages are stored ahead: with OverlapAllowAll
// nothing needs deciding at a tick, so the message of the next tick is published, due at its
// time, when the tick before it is acted on (or when the schedule is created or resumed), and
// its delivery is as precise as any delayed message's. The other policies decide at the tick.
func (c *compiledSchedule) prearmed() bool { return c.Overlap == OverlapAllowAll }

// fire acts on the schedule's pending tick, which fell due: it publishes the messages of the
// ticks due by now, as the catch-up and overlap policies allow, and arms the next tick (with a
// prearmed schedule, also storing its message ahead). resumed says that an earlier attempt at
// the tick was cut short (see SchedulerConfig.LeaseTimeout).
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
// SchedulerConfig.LeaseTimeout), the ticks due are owed: all of them are published, unless the
// previous tick's message is held. It records its decision in a and returns the ticks to publish and
// the messages to arm.
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
// finished): see SchedulerConfig.TickKeyRetention.
func (s *Scheduler) publishTicks(ctx context.Context, c *compiledSchedule, ticks, at []time.Time, notAfterUs int64) error {
	if len(ticks) == 0 {
		return nil
	}
	if at == nil {
		at = ticks
	}
	p := s.publisher
	if err := p.topics.ensure(ctx, s.store, c.Topic, p.config.Partitions, s.logger); err != nil {
		return err
	}
	byPartition := map[int][]store.Outgoing{}
	var order []int
	for i, t := range ticks {
		out, n, err := p.outgoing(c.Topic, c.tickMessage(t, TickKey(c.Name, t)), time.Now(), false, 0)
		if err != nil {
			return err
		}
		out.Delay, out.At, out.Latest = 0, at[i], time.Time{}
		if _, ok := byPartition[n]; !ok {
			order = append(order, n)
		}
		byPartition[n] = append(byPartition[n], out)
	}
	for _, n := range order {
		part, outs := store.Partition{Topic: c.Topic, N: n}, byPartition[n]
		call := store.Call{Token: store.NewToken(), TTL: p.callTTL, NotAfterUs: notAfterUs}
		var letters string
		err := p.groups.withGroups(ctx, part, func(ctx context.Context, groups []string) (err error) {
			letters, err = s.store.Publish(ctx, part, call, groups, outs)
			return err
		})
		if err != nil {
			return fmt.Errorf("redisdelay: schedule %s: publish to topic %s: %w", quote(c.Name), quote(c.Topic), err)
		}
		outcomes := make([]Outcome, len(outs))
		for i := range outs {
			outcomes[i] = outcomeOf(store.PublishOutcome(letters, i))
		}
		p.config.Metrics.publishedOutcomes(c.Topic, outcomes)
	}
	return nil
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
	part := store.Partition{Topic: c.Topic, N: keyPartition(key, s.config.Publisher.Partitions)}
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
