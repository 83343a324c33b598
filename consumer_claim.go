package redisdelay

// This file owns a partitionConsumer's claims: the call, made at once or sent ahead on a
// goroutine while claimed messages are held, and taking in its reply.

import (
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// claimReply is the outcome of one claim: its result, when it was sent and when its reply
// arrived (local clock), the acks it carried, the claim size it asked for, and its error.
type claimReply struct {
	res            store.ClaimResult
	sent, received time.Time
	acks           []*claimed
	limit          int
	err            error
}

// startClaim sends the next claim, with the queued acks, on a goroutine; its reply arrives on
// s.claiming. A claim sent while the subscription holds messages claimed ahead is thus under
// way during the hold, not after it: a message due during its round trip is not kept waiting
// for it (see deliverPending). One claim at most is under way.
func (s *partitionConsumer) startClaim() {
	reply := make(chan claimReply, 1)
	s.claiming = reply
	send := s.claimCall()
	go func() { reply <- send() }()
}

// claimCall prepares the next claim and returns the call that sends it, which may run on
// another goroutine: it reads nothing of s that the claim loop changes. The acks the claim
// carries leave the book while it is under way, as for sendAcks.
func (s *partitionConsumer) claimCall() func() claimReply {
	acks := s.book.takeAcks()
	ctx, cancel := s.callContext()
	call, part, epoch, limit, lease := s.claim, s.part, s.epoch, s.limit, s.cfg.LeaseTimeout
	sent := time.Now()
	s.claimSent = sent
	// The claim sees every message whose wake-up came before it was sent (a publish sends its
	// wake-up once stored); its reply's next claim time then covers them.
	s.woken = -1
	return func() claimReply {
		defer cancel()
		res, err := s.store.Claim(ctx, part, epoch, call, limit, lease, leasesOf(acks))
		return claimReply{res: res, sent: sent, received: time.Now(), acks: acks, limit: limit, err: err}
	}
}

// nextClaim returns the reply to the claim under way or failed meanwhile, waiting for it, or
// else makes a claim now. A reply that failed has given its acks back to the book; one that
// succeeded is taken in by tookClaim.
func (s *partitionConsumer) nextClaim() claimReply {
	var r claimReply
	switch {
	case s.failedClaim != nil:
		r, s.failedClaim = *s.failedClaim, nil
		return r
	case s.claiming != nil:
		r = <-s.claiming // the call is bounded by OperationTimeout
		s.claiming = nil
	default:
		r = s.claimCall()()
	}
	s.claimReturned(&r)
	return r
}

// claimReturned takes in the reply r of the claim under way once it arrived: a reply that
// failed gives its acks back to the book, and keeps the claim's token, so that the next claim
// is answered from the claim record when Redis ran this one; one that succeeded is taken in
// by tookClaim.
func (s *partitionConsumer) claimReturned(r *claimReply) {
	if r.err != nil {
		if len(r.acks) > 0 {
			s.book.ackUnsent(r.acks)
		}
		return
	}
	s.tookClaim(r)
}

// tookClaim takes in a claim that succeeded: a new token for the next claim, the Redis clock
// bound, the metrics, the acks Redis refused, and the claimed messages, which join the book in
// due-time order.
func (s *partitionConsumer) tookClaim(r *claimReply) {
	s.claim.Token = store.NewToken()
	s.redisClock.observe(r.res.NowUs, r.received)
	recordClaim(s.cfg.Metrics, s.topic, s.group, r.res, &s.lateness)
	s.logRefused(refusedOf(r.acks, r.res.RefusedAcks))
	if r.res.Dropped > 0 {
		s.logger.Error("Dropped due entries that were malformed or whose stored message had vanished", nil, watermill.LogFields{"dropped": r.res.Dropped})
	}
	if len(r.res.Messages) > 0 {
		s.book.claimed(claimedOf(r.res, &s.redisClock), r.sent)
	}
	s.lastClaim = *r
}

// pollClaim takes in the reply to the claim under way if it has arrived: a claim that failed
// is kept for the claim loop (see nextClaim), one that succeeded puts its messages in the book,
// whose heartbeat then extends their leases too.
func (s *partitionConsumer) pollClaim() {
	select {
	case r := <-s.claiming: // a nil channel (no claim under way) is never ready
		s.claimArrived(r)
	default:
	}
}

// claimArrived takes in the reply r of the claim under way, which arrived while the
// subscription was handing messages out.
func (s *partitionConsumer) claimArrived(r claimReply) {
	s.claiming = nil
	s.claimReturned(&r)
	if r.err != nil {
		s.failedClaim = &r
	}
}

// awaitClaim waits for the reply to the claim under way, if any, and takes it in, so that a
// stopping subscription releases what it claimed; a reply that is lost leaves the claim's
// token, by which the release finds it (see Release).
func (s *partitionConsumer) awaitClaim() {
	if s.claiming != nil {
		s.claimArrived(<-s.claiming)
	}
	s.failedClaim = nil
}
