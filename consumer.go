package redisdelay

// This file owns partitionConsumer, the consumer of one partition of a Subscribe call, and its
// claim loop: registering, claiming, and sleeping until the next due time. What it does with the
// leases it holds (confirming acks, the heartbeat, releasing them when it stops) is in
// consumer_leases.go; handing messages out is in delivery.go.

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
	"github.com/watermill-redisdelay/redisdelay/internal/wake"
)

const (
	// prefetchWindow bounds how much handler time the claimed-but-not-yet-delivered messages of
	// a subscription represent: a slow handler claims few messages at a time, so that its
	// group's other consumers can take the rest.
	prefetchWindow = 100 * time.Millisecond

	// claimAhead is how long before its due time (Redis clock) a subscription claims a message
	// without a key, to hold it until it is due rather than ask Redis then: the claim's round
	// trip and Redis's queue are then behind the due time, not in the message's lateness. It
	// covers a loopback round trip on a busy machine; see docs/guarantees.md for what a
	// message claimed ahead means to a cancel.
	claimAhead = 5 * time.Millisecond
)

// newPartitionConsumer returns the consumer of one partition of topic for one Subscribe call.
func newPartitionConsumer(s *Subscriber, ctx context.Context, topic, deadLetterTopic string, partition int, out chan *message.Message, turn chan struct{}, logger watermill.LoggerAdapter) *partitionConsumer {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 5 * time.Second
	group := s.config.ConsumerGroup
	part := store.Partition{Topic: topic, N: partition}.Of(group)
	return &partitionConsumer{
		cfg:              s.config,
		store:            s.store,
		wakeHub:          s.wakeHub,
		deadLetterGroups: &s.deadLetterGroups,
		clock:            s.clock,
		register:         func(ctx context.Context) ([]registration, error) { return s.register(ctx, topic) },
		forgetTopic:      func() { s.topics.forget(topic, deadLetterTopic) },
		ctx:              ctx,
		topic:            topic,
		part:             part,
		partition:        partition,
		deadLetterTopic:  deadLetterTopic,
		deadLetterPart:   store.Partition{Topic: deadLetterTopic, N: partition},
		group:            group,
		logger:           logger,
		nopLogger:        isNop(logger),
		out:              out,
		turn:             turn,
		limit:            1,
		claim:            store.ClaimCall{Subscription: store.NewToken(), Token: store.NewToken(), Ahead: s.aheadTime()},
		held:             &s.worker.held,
		retry:            retry,
		recheckPhase:     newRecheckPhase(time.Now(), s.config.RecheckInterval),
	}
}

// aheadTime is the claims' ClaimCall.Ahead of s's subscriptions: claimAhead (or what a test
// set), but none on the test kit's virtual clock, where the time to hold a message until is not
// a real time.
func (s *Subscriber) aheadTime() time.Duration {
	switch {
	case s.clock.Virtual():
		return 0
	case s.claimAhead > 0:
		return s.claimAhead
	}
	return claimAhead
}

// callContext bounds one Redis call by OperationTimeout and by the end of the subscription.
func (s *partitionConsumer) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.cfg.OperationTimeout)
}

// run is the claim loop: register the group if Subscribe could not (reg.epoch is then ""),
// claim, hand out, and sleep until the next due time when the group has nothing due. It
// releases what it holds when the subscription stops, and stops when the group was removed.
func (s *partitionConsumer) run(reg registration) {
	s.epoch, s.windowEnd = reg.epoch, reg.windowEnd
	s.book = newLeaseBook(s.cfg.LeaseTimeout, s.held)
	defer s.book.stop()
	defer s.sleeper.Close()
	channel := s.store.WakeChannel(s.part)
	watch := s.wakeHub.Watch(channel)
	defer s.wakeHub.Unwatch(channel, watch)
	s.wake, s.woken = watch, -1
	// Claim only once wake-ups are flowing, so none published in between is missed; the
	// recheck interval covers a confirmation that does not come.
	select {
	case <-watch.Ready():
	case <-time.After(s.cfg.OperationTimeout):
	case <-s.ctx.Done():
	}

	defer s.stop()
	for s.ctx.Err() == nil {
		if !s.claimTurn(watch) {
			return
		}
	}
}

// claimTurn is one turn of the claim loop: it registers the group when it must, claims, hands
// the claimed messages out, and sleeps when the group has nothing more due. It returns false
// when the subscription must stop: Redis evicts keys or the group was removed.
func (s *partitionConsumer) claimTurn(watch *wake.Watch) bool {
	if s.epoch == "" {
		regs, err := s.register(s.ctx)
		if errors.Is(err, ErrEvictingRedis) {
			s.logger.Error("Subscription stopped: Redis evicts keys", err, nil)
			return false
		} else if err != nil {
			s.backoff(err, "register consumer group")
			return true
		}
		s.epoch, s.windowEnd = regs[s.partition].epoch, regs[s.partition].windowEnd
	}
	if !s.windowEnd.IsZero() && !time.Now().Before(s.windowEnd) {
		s.closeWindow()
	}
	s.pollAcksSent()
	r := s.nextClaim()
	if errors.Is(r.err, ErrGroupRemoved) {
		// What it holds was dropped by the removal: stop() finds no lease to release.
		s.logger.Error("Subscription stopped: its consumer group was removed", r.err, nil)
		return false
	}
	if errors.Is(r.err, store.ErrRegistrationLost) {
		s.registrationLost(r.err)
		return true
	}
	if r.err != nil {
		// What an earlier claim took ahead, left waiting for this one (see deliverPending), is
		// handed out all the same.
		s.deliverPending(false)
		s.backoff(r.err, "claim")
		return true
	}
	s.retry.Reset()
	if s.book.hasPending() {
		start := time.Now()
		n := s.deliverPending(true)
		s.adaptLimit(n, time.Since(start))
		// A claim sent while messages were held is taken in by the next turn.
		if s.claiming != nil || s.failedClaim != nil || len(s.lastClaim.res.Messages) == s.lastClaim.limit {
			return true // more may be due
		}
	}
	// The group had nothing more due when the last claim ran, so sleep on what it said;
	// anything published since then has sent a wake-up, which ends the sleep at once.
	last := s.lastClaim
	s.sleep(last.res, last.sent.Add(last.received.Sub(last.sent)/2), watch)
	return true
}

// registrationLost starts the subscription afresh after Redis lost its data, the group's
// registration with it (see store.ErrRegistrationLost): what it holds was lost too, so its
// queued acks and leases are forgotten (their calls would be refused, see lease_marker in
// lua/lib), the topic is written to the topic registry again, and the next turn of the claim
// loop registers the group again.
func (s *partitionConsumer) registrationLost(err error) {
	s.logger.Error("Redis lost its data, the consumer group's registration with it: registering the group again; messages stored before the loss are gone", err, watermill.LogFields{"partition": s.partition, "acks_forgotten": len(s.book.acks)})
	if m := s.cfg.Metrics; m != nil {
		m.RegistrationLost(s.topic, s.group)
	}
	s.awaitAcksSent()
	s.book.clear()
	s.forgetTopic()
	s.epoch, s.windowEnd = "", time.Time{}
}

// closeWindow drops, in one bounded call, up to closeWindowLimit of the messages the
// partition's new-group window left once it ended, and keeps windowEnd set (in the past) while
// more are left, so that the next turn of the claim loop drops more; a window that is open
// again moves windowEnd to its new end. Publishes and registrations drop them too; this is for
// a topic nobody publishes to.
func (s *partitionConsumer) closeWindow() {
	ctx, cancel := s.callContext()
	defer cancel()
	left, open, err := s.store.CloseWindow(ctx, s.part.Partition)
	switch {
	case err != nil:
		s.logger.Error("Dropping what the new-group window kept failed, will retry", err, nil)
		s.windowEnd = time.Now().Add(s.cfg.RecheckInterval)
	case open >= 0:
		s.windowEnd = time.Now().Add(open)
	case left == 0:
		s.windowEnd = time.Time{}
	}
}

// adaptLimit sizes the next claim so that claimed messages wait about prefetchWindow of
// handler time at most, growing at most twofold per batch.
func (s *partitionConsumer) adaptLimit(delivered int, took time.Duration) {
	if delivered == 0 {
		return
	}
	next := s.cfg.ClaimBatchSize
	if perMessage := took / time.Duration(delivered); perMessage > 0 {
		next = int(min(int64(prefetchWindow/perMessage), int64(next)))
	}
	s.limit = max(1, min(next, 2*s.limit))
}

// sleep waits until the group's next claim time (res.NextClaimUs: its next due time, less the
// claim-ahead time for a message without a key) or lease deadline, a wake-up for an earlier due
// time (less the claim-ahead time), the recheck interval, or the end of the subscription,
// whichever comes first. readAt is when, on the local clock, the claim most likely read the
// Redis clock (res.NowUs): halfway through its round trip.
func (s *partitionConsumer) sleep(res store.ClaimResult, readAt time.Time, watch *wake.Watch) {
	// The next claim then reaches Redis about a one-way trip after that time. Waking a little
	// early costs an empty claim and a short sleep, never an early delivery: the claim script
	// takes only what is due on the Redis clock, or due within the claim-ahead time, which the
	// subscription holds until it is due (see hold).
	until := func(dueUs int64) time.Duration {
		return time.Duration(dueUs-res.NowUs)*time.Microsecond - time.Since(readAt)
	}
	if due := s.woken; due >= 0 {
		// A wake-up came while messages were handed out.
		s.woken = -1
		if due == 0 || until(due) <= s.claim.Ahead {
			return
		}
		res.NextClaimUs = minDue(res.NextClaimUs, due-s.claim.Ahead.Microseconds())
	}
	// The recheck comes at the subscription's own phase, so that subscriptions that claimed
	// together do not recheck together (see recheck.go).
	wait := recheckWait(time.Now(), s.recheckPhase, s.cfg.RecheckInterval)
	for _, next := range []int64{res.NextClaimUs, res.NextLeaseUs} {
		if next >= 0 {
			wait = min(wait, until(next))
		}
	}
	if !s.windowEnd.IsZero() {
		wait = min(wait, time.Until(s.windowEnd))
	}
	// Acks are sent at once when nothing is left to hand out; batching is for busy times.
	// (Leaving them to ride the next claim when it comes within the ack timer saved a round
	// trip, but an acked message then still counted as in flight for operators, and the
	// model-based test saw removals and purges count it.) They are sent on a call of their own
	// that the sleep does not wait for: a claim due within its round trip goes out on time.
	s.sendAcks()
	if wait <= 0 {
		return
	}
	s.sleepAtMost(wait, watch, until)
}

// sleepAtMost waits wait at most, less when a wake-up comes for a due time that until (the
// time left before a due time, Unix µs on the Redis clock) puts earlier, no more when it is a
// "check now" or already due. It confirms the acks when the ack timer fires meanwhile. Its
// timer fires clock.PreciseTail before the end, and the rest is slept precisely (see
// clock.SleepPrecisely): a Go timer alone would wake up to 1 ms late.
func (s *partitionConsumer) sleepAtMost(wait time.Duration, watch *wake.Watch, until func(dueUs int64) time.Duration) {
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait - clock.PreciseTail)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			s.sleeper.Sleep(time.Until(deadline))
			return
		case due := <-watch.Due():
			w := until(due) - s.claim.Ahead
			if due == 0 || w <= 0 {
				return
			}
			if time.Now().Add(w).Before(deadline) {
				deadline = time.Now().Add(w)
				timer.Reset(w - clock.PreciseTail)
			}
		case r := <-s.ackSent:
			s.ackReplied(r)
			s.sendAcks()
		case <-s.book.ackTimer.C:
			s.confirmAcks()
		case <-s.ctx.Done():
			return
		}
	}
}

// minDue is the earlier of two due times, -1 meaning none.
func minDue(a, b int64) int64 {
	if a < 0 || (b >= 0 && b < a) {
		return b
	}
	return a
}

// woke notes a wake-up that arrived while the subscription was handing messages out (see
// partitionConsumer.wake).
func (s *partitionConsumer) woke(due int64) {
	s.woken = minDue(s.woken, due)
	if due == 0 {
		s.extendLeases()
	}
}

// wokenBefore reports whether a wake-up noted since the last claim was sent (see woke) asks
// for a claim before dueUs (Unix µs, Redis clock): a "check now", or an earlier due time.
func (s *partitionConsumer) wokenBefore(dueUs int64) bool {
	return s.woken == 0 || (s.woken > 0 && s.woken < dueUs)
}

// backoff logs a failed Redis call and waits before the next try. A call that the end of the
// subscription cut short is no failure: it is logged at debug level, and the loop ends.
func (s *partitionConsumer) backoff(err error, what string) {
	if s.ctx.Err() != nil {
		s.logger.Debug("Redis call cut short by the end of the subscription", watermill.LogFields{"operation": what, "err": err.Error()})
		return
	}
	wait := s.retry.NextBackOff()
	s.logger.Error("Redis call failed, retrying", err, watermill.LogFields{"operation": what, "retry_in": wait.String()})
	select {
	case <-time.After(wait):
	case <-s.ctx.Done():
	}
}
