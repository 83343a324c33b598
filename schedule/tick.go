package schedule

// This file owns the tick messages: their outcomes, their payload and key, the message each tick
// publishes, and what a Scheduler does when it receives one (act, actOn); what it does with a
// tick that fell due is in fire.go.

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// TickOutcome is the outcome of a schedule's last tick, as the Inspector shows it.
type TickOutcome string

const (
	// TickPublished: the tick's message was published (with catch-up, one or more ticks').
	TickPublished TickOutcome = "published"
	// TickSkippedOverlap: the tick was skipped because the previous tick's message was still
	// held (OverlapSkip, or OverlapBufferOne with a tick held back already).
	TickSkippedOverlap TickOutcome = "skipped-overlap"
	// TickSkippedLate: the tick was later than the catch-up window, or not the latest with
	// CatchUpLatest, and was skipped.
	TickSkippedLate TickOutcome = "skipped-late"
	// TickBuffered: the tick is held back until the previous tick's message is finished
	// (OverlapBufferOne).
	TickBuffered TickOutcome = "buffered"
	// TickPublishedBuffered: a tick held back was published once its predecessor finished.
	TickPublishedBuffered TickOutcome = "published-buffered"
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

// tickMessageKey is the key of a tick message on TickTopic: unique per schedule
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
	md[redisdelay.ScheduleMetadataKey] = c.Name
	md[redisdelay.TickTimeMetadataKey] = tick.UTC().Format(time.RFC3339Nano)
	md[redisdelay.KeyMetadataKey] = key
	md[redisdelay.OnDuplicateMetadataKey] = string(redisdelay.KeepExisting)
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
	data, err := s.pub.Marshal(TickTopic, msg)
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
	// from Redis or failed (see Config.LeaseTimeout).
	attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptMetadataKey))
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
