package redisdelay

// This file owns what a partitionConsumer does with the leases it holds: confirming acks,
// extending leases (the heartbeat), and, when it stops, sending cut-short nacks and releasing
// what it still holds.

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// confirmAcks sends the queued acks to Redis; on failure they stay queued for the next try.
func (s *partitionConsumer) confirmAcks() {
	if len(s.book.acks) == 0 {
		return
	}
	ctx, cancel := s.callContext()
	defer cancel()
	if err := s.confirmAcksWithin(ctx, s.store); err != nil && s.ctx.Err() == nil {
		s.logger.Error("Ack failed, will retry", err, watermill.LogFields{"acks": len(s.book.acks)})
		s.book.ackRetry()
	}
	// When the subscription stopped meanwhile, stop confirms the acks that are still queued.
}

// ackReply is the outcome of a confirmation that sendAcks sent: its acks, the IDs of those
// Redis refused, and the call's error.
type ackReply struct {
	acks    []*claimed
	refused []string
	err     error
}

// sendAcks sends the queued acks to Redis in a call of their own, on a goroutine, so that a
// claim due sooner than that call's round trip need not wait for its reply. The call is sent
// first, but on a connection of its own it may reach Redis after the claim: no matter, a claim
// ends no lease that is held (one that expired meanwhile is claimed again, as when an ack comes
// late for any reason: at least once). The acks leave the book (the next claim does not carry
// them again) and the reply arrives on ackSent: ackReplied handles it. While one such call is
// under way, new acks stay queued: for the next claim, or for the next such call once its
// reply came, when the subscription still sleeps.
func (s *partitionConsumer) sendAcks() {
	if len(s.book.acks) == 0 || s.ackSent != nil {
		return
	}
	acks := s.book.takeAcks()
	reply := make(chan ackReply, 1)
	s.ackSent = reply
	ctx, cancel := s.callContext()
	part, epoch := s.part, s.epoch
	go func() {
		defer cancel()
		refused, err := s.store.Ack(ctx, part, epoch, leasesOf(acks))
		reply <- ackReply{acks: acks, refused: refused, err: err}
	}()
}

// ackReplied takes in the reply to the acks sendAcks sent. Acks whose call failed are queued
// again, for the next claim, the ack timer or the final release.
func (s *partitionConsumer) ackReplied(r ackReply) {
	s.ackSent = nil
	if r.err != nil {
		if s.ctx.Err() == nil {
			s.logger.Error("Ack failed, will retry", r.err, watermill.LogFields{"acks": len(r.acks)})
		}
		s.book.ackUnsent(r.acks)
		return
	}
	s.logRefused(refusedOf(r.acks, r.refused))
}

// awaitAcksSent waits for the reply to the acks sendAcks sent, if any, and takes it in: when it
// returns, every unconfirmed ack is in the book.
func (s *partitionConsumer) awaitAcksSent() {
	if s.ackSent != nil {
		s.ackReplied(<-s.ackSent)
	}
}

// pollAcksSent takes in the reply to the acks sendAcks sent if it has arrived.
func (s *partitionConsumer) pollAcksSent() {
	select {
	case r := <-s.ackSent: // a nil channel (no call under way) is never ready
		s.ackReplied(r)
	default:
	}
}

// confirmAcksWithin sends the queued acks through st, bounded by ctx; on failure they stay
// queued.
func (s *partitionConsumer) confirmAcksWithin(ctx context.Context, st store.Store) error {
	if len(s.book.acks) == 0 {
		return nil
	}
	refused, err := st.Ack(ctx, s.part, s.epoch, leasesOf(s.book.acks))
	if err != nil {
		return err
	}
	s.acksConfirmed(refused)
	return nil
}

// acksConfirmed tells the book that Redis processed the queued acks and logs the refused ones.
func (s *partitionConsumer) acksConfirmed(refused []string) {
	s.logRefused(s.book.acksConfirmed(refused))
}

// logRefused logs the acks that Redis refused because their lease had been lost.
func (s *partitionConsumer) logRefused(refused []*claimed) {
	for _, c := range refused {
		s.logger.Info("Ack refused: the lease was lost (it expired and the message was claimed again, or the message was cancelled)", watermill.LogFields{"message_uuid": c.uuid, "attempt": c.Attempt})
	}
}

// extendLeases is the heartbeat: it confirms queued acks and extends the leases of every
// message the subscription still holds. Messages whose lease was lost meanwhile are dropped
// from the prefetch buffer, so they are not delivered twice.
func (s *partitionConsumer) extendLeases() {
	s.pollClaim()
	s.confirmAcks()
	held := s.book.held()
	if len(held) == 0 {
		return
	}
	ctx, cancel := s.callContext()
	defer cancel()
	sent := time.Now()
	lost, err := s.store.Extend(ctx, s.part, s.epoch, s.cfg.LeaseTimeout, leasesOf(held))
	if err != nil {
		if s.ctx.Err() == nil {
			s.logger.Error("Lease extension failed, will retry", err, watermill.LogFields{"held": len(held)})
		}
		return // when the subscription stopped meanwhile, stop releases what it holds
	}
	s.book.extended(sent)
	if c := s.book.leasesLost(lost); c != nil {
		s.logger.Info("Lease lost while the handler runs: it expired and another consumer claimed the message, or the message was cancelled", watermill.LogFields{"message_uuid": c.uuid, "attempt": c.Attempt})
	}
}

// stop confirms queued acks, sends the nacks the stop cut short, and releases every message
// still held, and those of a claim whose reply was lost, all within one OperationTimeout;
// what it cannot release comes back when its lease expires. When the application closed the Redis client first, it does so over a
// short-lived client of its own built from the same options (see store.Store.reopened).
func (s *partitionConsumer) stop() {
	s.awaitClaim()
	s.awaitAcksSent()
	held := s.book.held()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OperationTimeout)
	defer cancel()
	err := s.finish(ctx, s.store, held)
	if errors.Is(err, redis.ErrClosed) {
		if fallback, closeClient, ok := s.store.Reopened(); ok {
			defer func() { _ = closeClient() }()
			err = s.finish(ctx, fallback, held)
		}
	}
	if err != nil {
		s.logger.Error("Release on close failed; unconfirmed acks and nacks and held messages are delivered again after their lease", err, watermill.LogFields{"held": len(held), "acks": len(s.book.acks), "nacks": len(s.book.nacks)})
	}
	s.book.clear()
	s.logger.Debug("Subscription stopped", watermill.LogFields{"released": len(held)})
}

// finish confirms the queued acks, sends the nacks the stop cut short and releases held
// through st, bounded by ctx.
func (s *partitionConsumer) finish(ctx context.Context, st store.Store, held []*claimed) error {
	ackErr := s.confirmAcksWithin(ctx, st)
	return errors.Join(ackErr, s.sendUnsentNacks(ctx, st), st.Release(ctx, s.part, s.epoch, s.claim, heldOf(held)))
}

// sendUnsentNacks sends again, through st, the nacks whose call the stop cut short. A nack that
// Redis refuses because the lease is gone had run the first time (or its lease had expired):
// either way nothing is left to do for it.
func (s *partitionConsumer) sendUnsentNacks(ctx context.Context, st store.Store) error {
	for len(s.book.nacks) > 0 {
		n := s.book.nacks[0]
		if err := st.Nack(ctx, s.part, s.epoch, n.c.Lease, n.delay, n.changed); err != nil && !errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		s.book.nackSent()
	}
	return nil
}
