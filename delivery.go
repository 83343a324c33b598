package redisdelay

// This file owns delivery: handing the claimed messages of a subscription out, one at a time,
// on the output channel of its Subscribe call, taking turns with the call's other partitions,
// and acting on each Ack or Nack. While it waits, it keeps the heartbeat and the ack timer of
// the lease book going.

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// deliverPending hands the claimed messages out one at a time and returns how many were
// finished. It returns early when the subscription stops. When mayClaim, and the next message
// is held until its due time (claimed ahead), it sends the next claim (startClaim) before the
// hold if half the claim-ahead time has passed since the last claim was sent, so that the
// messages due just after this claim's reach are claimed ahead too, not once due, or if a
// wake-up announced a message due before the held one; the hold does not wait for that claim.
// A wake-up of that kind that arrives during the hold sends a claim then (see holdWatching):
// a message published while another is held, due before it, is not kept waiting for the hold
// (up to the claim-ahead time). When the claim's reply arrives during a hold, its messages
// join the queue in due-time order and the earliest is handed out next.
func (s *partitionConsumer) deliverPending(mayClaim bool) (n int) {
	for c := s.book.next(); c != nil; c = s.book.next() {
		held := time.Until(c.holdUntil) > 0
		watch := mayClaim && held && s.failedClaim == nil
		if watch && s.claiming == nil && (time.Since(s.claimSent) >= s.claim.Ahead/2 || s.wokenBefore(c.DueUs)) {
			s.startClaim()
		}
		if watch {
			replied, ok := s.holdWatching(c, true)
			if !ok || replied {
				s.book.putBack(c)
			}
			if !ok {
				return n
			}
			if replied {
				continue
			}
		}
		if !s.deliver(c) {
			if !c.delivered {
				s.book.putBack(c)
			}
			return n
		}
		n++
	}
	return n
}

// deliver sends one message and waits for its Ack or Nack. It returns false, leaving c to be
// released, when the subscription stops first.
func (s *partitionConsumer) deliver(c *claimed) bool {
	// A message claimed ahead of its due time waits for it before anything is done with it:
	// its deadline check and a dead letter for its spent attempts come at its due time too.
	if !s.hold(c) {
		return false
	}
	msg := s.delivery(c)
	if msg == nil {
		return true // removed or dead-lettered
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	msg.SetContext(ctx)

	// Take this Subscribe call's turn (one message in flight across its partitions), then send.
	if sendHolding(s, s.turn, struct{}{}, nil) != sent {
		return false
	}
	defer func() { <-s.turn }()
	outcome := lost
	if s.stillLeased(c) {
		// The handler may take a while to read: a lease found lost meanwhile stops the send.
		outcome = sendHolding(s, s.out, msg, c)
	}
	switch outcome {
	case stopped:
		return false
	case lost:
		s.logger.Info("Not handing out a message whose lease was lost while it waited: it expired and another consumer claimed it, the message was cancelled, or its group was removed", watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.Attempt})
		s.book.dropLost(c)
		return true
	}
	s.book.handedOut(c)
	if !s.nopLogger {
		s.logger.Trace("Message delivered", watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.Attempt})
	}
	return s.awaitOutcome(c, msg)
}

// hold waits until, on the local clock, for a message claimed ahead of its due time (see
// claimedOf): its timer wakes clock.PreciseTail early and the rest is slept precisely on the
// subscription's Sleeper, as for the claim loop's sleep. It returns false when the subscription stops first.
func (s *partitionConsumer) hold(c *claimed) bool {
	_, ok := s.holdWatching(c, false)
	return ok
}

// holdWatching holds c until its holdUntil, as hold does. When watch, its timer part also
// watches the claim under way and the group's wake-ups: it ends when the claim's reply
// arrives (taken in, see claimArrived), and a wake-up for a message due before c (or a "check
// now") sends a claim when none is under way, whose reply then ends it. It reports whether a
// reply came and whether the subscription goes on. The last clock.PreciseTail is slept
// precisely and watches nothing: a reply or wake-up then waits.
func (s *partitionConsumer) holdWatching(c *claimed, watch bool) (replied, ok bool) {
	wait := time.Until(c.holdUntil)
	if wait <= 0 {
		return false, true
	}
	if wait > clock.PreciseTail {
		timer := time.NewTimer(wait - clock.PreciseTail)
		defer timer.Stop()
		var claiming <-chan claimReply
		var wake <-chan int64
		if watch {
			wake = s.wake.Due()
		}
	timed:
		for {
			if watch {
				claiming = s.claiming // a nil channel (no claim under way) is never ready
			}
			select {
			case r := <-claiming:
				s.claimArrived(r)
				return true, true
			case due := <-wake:
				s.woke(due)
				if s.claiming == nil && s.wokenBefore(c.DueUs) {
					s.startClaim()
				}
			case <-timer.C:
				break timed
			case <-s.ctx.Done():
				return false, false
			}
		}
	}
	s.sleeper.Sleep(time.Until(c.holdUntil))
	return false, s.ctx.Err() == nil
}

// delivery decodes c into the message to hand out, with its delivery metadata, and reads its
// options once, into c.opts. It returns nil when c is done with instead: stored data that
// cannot be decoded is removed, a message claimed for its first attempt after its deliver-by
// deadline is expired (deadline.go), and a message whose last attempt was never acknowledged
// is dead-lettered.
func (s *partitionConsumer) delivery(c *claimed) *message.Message {
	var msg *message.Message
	var err error
	if bk, ok := store.BatchKeyOf(c.ID); ok {
		msg, err = batchMessage(c.ID, bk, s.partition, c.Data)
	} else {
		msg, err = s.cfg.Marshaler.Unmarshal(s.topic, c.Data)
	}
	if err != nil {
		// Stored data that cannot be decoded would fail on every attempt and cannot carry
		// dead-letter metadata: it is removed, loudly, so that the group goes on.
		s.logger.Error("Removing stored message that cannot be unmarshaled", err, watermill.LogFields{"id": c.ID, "attempt": c.Attempt, "bytes": len(c.Data)})
		s.book.acked(c)
		return nil
	}
	c.uuid = msg.UUID
	key, keyed := store.KeyOf(c.ID)
	if o := receivedOptions(msg, key, keyed); !o.isZero() {
		c.opts = new(received) // allocated here only, so that o does not escape
		*c.opts = o
	}
	if s.expireIfLate(c, msg) {
		return nil
	}
	if exhausted(c.Attempt-1, s.cfg.MaxAttempts) {
		// Its last attempt was never acknowledged.
		s.deadLetter(c, msg, DeadLetterReasonLeaseExpired)
		return nil
	}
	setDeliveryMetadata(msg, c.options(), c.Attempt, c.DueUs)
	return msg
}

// awaitOutcome waits for the Ack or Nack of msg, handed out for c, and acts on it, keeping the
// leases and acks going meanwhile. It returns false, leaving c to be released, when the
// subscription stops first.
func (s *partitionConsumer) awaitOutcome(c *claimed, msg *message.Message) bool {
	for {
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-s.book.heartbeat.C:
			s.extendLeases()
			continue
		case due := <-s.wake.Due():
			s.woke(due)
			continue
		case <-s.book.ackTimer.C:
			s.confirmAcks()
			continue
		case <-s.ctx.Done():
		}
		// An Ack or Nack may race with the end of the subscription (select picks among ready
		// cases at random), so the outcome is read once more here, in one place.
		return s.finished(c, msg)
	}
}

// finished acts on msg's Ack or Nack, if it has one, and reports whether it had.
func (s *partitionConsumer) finished(c *claimed, msg *message.Message) bool {
	select {
	case <-msg.Acked():
		s.book.acked(c)
		if m := s.cfg.Metrics; m != nil {
			m.Acked(s.topic, s.group)
		}
		return true
	case <-msg.Nacked():
		s.book.finished(c)
		if m := s.cfg.Metrics; m != nil {
			m.Nacked(s.topic, s.group)
		}
		s.nack(c, msg)
		return true
	default:
		return false
	}
}

// stillLeased is the fencing check before a hand-over: c may have waited for its Subscribe
// call's turn behind another partition's handler. Its lease is taken as held when no
// extension reported it lost and the leases were last set less than LeaseTimeout/3 ago (the
// heartbeat's period); else they are extended now, and c is handed out only when Redis
// confirms its lease, or, when Redis cannot be reached, while its lease surely lasts.
func (s *partitionConsumer) stillLeased(c *claimed) bool {
	select {
	case due := <-s.wake.Due(): // a removal's "check now" may have just arrived
		s.woke(due)
	default:
	}
	if !c.lost && time.Since(s.book.extendedAt) < s.cfg.LeaseTimeout/3 {
		return true
	}
	if !c.lost {
		s.extendLeases()
	}
	return !c.lost && time.Since(s.book.extendedAt) < s.cfg.LeaseTimeout
}

// sendOutcome is how sendHolding ended.
type sendOutcome int

const (
	sent    sendOutcome = iota
	stopped             // the subscription stopped first
	lost                // the lease of the message being sent was found lost first
)

// sendHolding sends v on ch while keeping the subscription's leases and acks going. With c,
// the message v hands out, it gives up once c's lease is found lost, or once the leases were
// last confirmed a whole LeaseTimeout ago (Redis unreachable): a handler must not get a copy
// another consumer may hold.
func sendHolding[T any](s *partitionConsumer, ch chan<- T, v T, c *claimed) sendOutcome {
	for {
		if c != nil && (c.lost || time.Since(s.book.extendedAt) >= s.cfg.LeaseTimeout) {
			return lost
		}
		select {
		case ch <- v:
			return sent
		case <-s.book.heartbeat.C:
			s.extendLeases()
		case due := <-s.wake.Due():
			s.woke(due)
		case <-s.book.ackTimer.C:
			s.confirmAcks()
		case <-s.ctx.Done():
			return stopped
		}
	}
}

// nack carries out decideNack for a nacked message: a dead letter, or due again after the
// decided delay, with the handler's changes stored when it made any.
func (s *partitionConsumer) nack(c *claimed, msg *message.Message) {
	delivered := withoutDeliveryMetadata(msg)
	if delivered == msg {
		delivered = msg.Copy() // the handler removed the delivery keys; never change its message
	}
	var original *message.Message
	if !exhausted(c.Attempt, s.cfg.MaxAttempts) {
		original, _ = s.cfg.Marshaler.Unmarshal(s.topic, c.Data)
	}
	d := decideNack(c.Attempt, s.cfg.MaxAttempts, s.cfg.NackBackoff, c.options(), original, delivered, s.clock.Now(), s.clock.Virtual())
	fields := watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.Attempt}
	if d.deadLetter {
		s.deadLetter(c, delivered, DeadLetterReasonNacked)
		return
	}
	if d.badDelay != nil {
		s.logger.Error("Ignoring invalid delay metadata set before Nack; using the nack backoff", d.badDelay, fields)
	}
	var changed []byte
	if d.changed {
		data, err := s.cfg.Marshaler.Marshal(s.topic, delivered)
		if err != nil {
			s.logger.Error("Cannot store the changes made before Nack", err, fields)
		}
		changed = data
	}
	ctx, cancel := s.callContext()
	defer cancel()
	switch err := s.store.Nack(ctx, s.part, s.epoch, c.Lease, d.delay, changed); {
	case errors.Is(err, store.ErrLeaseLost):
		s.logger.Info("Nack refused: the lease was lost (it expired and the message was claimed again, or the message was cancelled)", fields)
	case err != nil && s.ctx.Err() != nil:
		// The subscription stopped during the call (or before it): stop sends the nack again,
		// so that the message is due after its backoff rather than after its lease. A second
		// run is harmless: the first one ended the lease, and nack.lua refuses the lost lease.
		s.logger.Debug("Nack cut short by the end of the subscription; it is sent again on release", fields)
		s.book.nackCutShort(unsentNack{c: c, delay: d.delay, changed: changed})
	case err != nil:
		// The message keeps its lease and comes back when the lease expires.
		s.logger.Error("Nack failed; the message is delivered again after its lease", err, fields)
	}
}
