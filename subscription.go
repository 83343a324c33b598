package redisdelay

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"
	"github.com/redis/go-redis/v9"
)

const (
	// prefetchWindow bounds how much handler time the claimed-but-not-yet-delivered messages of
	// a subscription represent: a slow handler claims few messages at a time, so that its
	// group's other consumers can take the rest.
	prefetchWindow = 100 * time.Millisecond
	// ackDelay is the longest an ack waits to be confirmed to Redis when no claim or heartbeat
	// carries it earlier. Batching acks saves round trips; the delay bounds the duplicates a
	// crash can cause.
	ackDelay = 50 * time.Millisecond
	// recheckJitter is the share of RecheckInterval by which an idle subscription's recheck comes
	// earlier, at random.
	recheckJitter = 0.25
	// dueTimeLayout formats DueTimeMetadataKey: RFC3339 with microseconds, the precision of due
	// times.
	dueTimeLayout = "2006-01-02T15:04:05.000000Z07:00"
)

// subscription serves one partition of a Subscribe call: a single goroutine that claims,
// delivers, acks and releases, so none of its state needs a lock. The subscriptions of the
// partitions of one Subscribe call share its output channel and take turns, so that one message
// at most is in flight.
type subscription struct {
	sub             *Subscriber
	ctx             context.Context
	topic           string // the topic, for messages and logs
	part            string // the partition's name in the key space
	deadLetterTopic string
	deadLetterPart  string
	group           string
	logger          watermill.LoggerAdapter
	out             chan *message.Message
	turn            chan struct{} // holds a token while a message of the Subscribe call is in flight

	pending  []*claimed // claimed, not yet delivered, in due order
	inflight *claimed   // delivered, waiting for Ack or Nack
	acks     []*claimed // acked, not yet confirmed to Redis
	limit    int        // how many messages the next claim takes
	// claim names the next claim: the subscription's claim record and a token that stays the
	// same until a claim's reply arrives, so a claim whose reply was lost is answered again.
	claim claimCall

	heartbeat *time.Ticker // extends leases every LeaseTimeout/3
	ackTimer  *time.Timer  // confirms acks ackDelay after the first unconfirmed one
	retry     *backoff.ExponentialBackOff
}

// newSubscription returns the subscription of one partition. ctx ends when the Subscribe
// context is cancelled or the Subscriber closes; it is the subscription's only stop signal.
func newSubscription(s *Subscriber, ctx context.Context, topic, deadLetterTopic string, partition int, out chan *message.Message, turn chan struct{}, logger watermill.LoggerAdapter) *subscription {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 5 * time.Second
	part := partitionName(topic, partition)
	return &subscription{
		sub:             s,
		ctx:             ctx,
		topic:           topic,
		part:            part,
		claim:           claimCall{record: s.store.keys.claimRecord(part, s.config.ConsumerGroup, newToken()), token: newToken()},
		deadLetterTopic: deadLetterTopic,
		deadLetterPart:  partitionName(deadLetterTopic, partition),
		group:           s.config.ConsumerGroup,
		logger:          logger,
		out:             out,
		turn:            turn,
		limit:           1,
		retry:           retry,
	}
}

// stopped reports whether the Subscribe context is done or the Subscriber is closing.
func (s *subscription) stopped() bool { return s.ctx.Err() != nil }

// callContext bounds one Redis call by OperationTimeout and by the end of the subscription.
func (s *subscription) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.sub.config.OperationTimeout)
}

func (s *subscription) run(registered bool) {
	cfg := s.sub.config
	s.heartbeat = time.NewTicker(cfg.LeaseTimeout / 3)
	defer s.heartbeat.Stop()
	s.ackTimer = time.NewTimer(time.Hour)
	s.ackTimer.Stop()
	defer s.ackTimer.Stop()

	channel := s.sub.store.keys.group(s.part, s.group).wakeChannel
	wake := s.sub.wakeups.watch(channel)
	defer s.sub.wakeups.unwatch(channel, wake)
	// Claim only once wake-ups are flowing, so none published in between is missed; the
	// recheck interval covers a confirmation that does not come.
	select {
	case <-wake.ready:
	case <-time.After(cfg.OperationTimeout):
	case <-s.ctx.Done():
	}

	defer s.stop()
	for !s.stopped() {
		if !registered {
			if err := s.sub.register(s.ctx, s.topic); errors.Is(err, ErrEvictingRedis) {
				s.logger.Error("Subscription stopped: Redis evicts keys", err, nil)
				return
			} else if err != nil {
				s.backoff(err, "register consumer group")
				continue
			}
			registered = true
		}
		limit := s.limit
		res, receivedAt, err := s.claimNext()
		if err != nil {
			s.backoff(err, "claim")
			continue
		}
		s.retry.Reset()
		if len(res.messages) > 0 {
			s.pending = res.messages
			start := time.Now()
			n := s.deliverPending()
			s.adaptLimit(n, time.Since(start))
			if len(res.messages) == limit {
				continue // more may be due
			}
		}
		// The group had nothing more due when this claim ran, so sleep on what it said; anything
		// published since then has sent a wake-up, which ends the sleep at once.
		s.sleep(res, receivedAt, wake)
	}
}

// claim confirms the pending acks and claims the next batch in one round trip. When the reply
// is lost, the claim keeps its token, and the next try is answered from the claim record.
func (s *subscription) claimNext() (claimResult, time.Time, error) {
	ctx, cancel := s.callContext()
	defer cancel()
	res, err := s.sub.store.claim(ctx, s.part, s.group, s.claim, s.limit, s.sub.config.LeaseTimeout, s.acks)
	if err != nil {
		return res, time.Time{}, err
	}
	s.claim.token = newToken()
	s.acksConfirmed(res.refusedAcks)
	if res.dropped > 0 {
		s.logger.Error("Dropped due entries that were malformed or whose stored message had vanished", nil, watermill.LogFields{"dropped": res.dropped})
	}
	return res, time.Now(), nil
}

// adaptLimit sizes the next claim so that claimed messages wait about prefetchWindow of
// handler time at most, growing at most twofold per batch.
func (s *subscription) adaptLimit(delivered int, took time.Duration) {
	if delivered == 0 {
		return
	}
	next := s.sub.config.ClaimBatchSize
	if perMessage := took / time.Duration(delivered); perMessage > 0 {
		next = int(min(int64(prefetchWindow/perMessage), int64(next)))
	}
	s.limit = max(1, min(next, 2*s.limit))
}

// sleep waits until the group's next due time or lease deadline, a wake-up for an earlier due
// time, the recheck interval, or the end of the subscription, whichever comes first.
func (s *subscription) sleep(res claimResult, receivedAt time.Time, wake *wakeup) {
	// The Redis clock at receivedAt was at least res.nowUs, so this never wakes early.
	until := func(dueUs int64) time.Duration {
		return time.Duration(dueUs-res.nowUs)*time.Microsecond - time.Since(receivedAt)
	}
	// Acks are confirmed at once when nothing is left to hand out; batching is for busy times.
	s.confirmAcks()
	// Jitter keeps the rechecks of many idle subscriptions from coming in the same instant.
	wait := time.Duration(float64(s.sub.config.RecheckInterval) * (1 - recheckJitter*rand.Float64()))
	for _, next := range []int64{res.nextDueUs, res.nextLeaseUs} {
		if next >= 0 {
			wait = min(wait, until(next))
		}
	}
	if wait <= 0 {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-timer.C:
			return
		case due := <-wake.due:
			w := until(due)
			if due == 0 || w <= 0 {
				return
			}
			if time.Now().Add(w).Before(deadline) {
				deadline = time.Now().Add(w)
				timer.Reset(w)
			}
		case <-s.ackTimer.C:
			s.confirmAcks()
		case <-s.ctx.Done():
			return
		}
	}
}

// deliverPending hands the claimed messages out one at a time and returns how many were
// finished. It returns early when the subscription stops.
func (s *subscription) deliverPending() int {
	n := 0
	for len(s.pending) > 0 {
		c := s.pending[0]
		s.pending = s.pending[1:]
		if !s.deliver(c) {
			if !c.delivered {
				s.pending = append([]*claimed{c}, s.pending...)
			}
			return n
		}
		n++
	}
	return n
}

// deliver sends one message and waits for its Ack or Nack. It returns false, leaving c to be
// released, when the subscription stops first.
func (s *subscription) deliver(c *claimed) bool {
	msg, err := s.sub.config.Marshaler.Unmarshal(s.topic, c.data)
	if err != nil {
		// Stored data that cannot be decoded would fail on every attempt and cannot carry
		// dead-letter metadata: it is removed, loudly, so that the group goes on.
		s.logger.Error("Removing stored message that cannot be unmarshaled", err, watermill.LogFields{"id": c.id, "attempt": c.attempt, "bytes": len(c.data)})
		s.addAck(c)
		return true
	}
	c.uuid = msg.UUID
	if s.exhausted(c.attempt - 1) {
		// Its last attempt was never acknowledged.
		s.deadLetter(c, msg, DeadLetterReasonLeaseExpired)
		return true
	}
	s.setDeliveryMetadata(msg, c)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	msg.SetContext(ctx)
	logFields := watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.attempt}

	// Take this Subscribe call's turn (one message in flight across its partitions), then send.
	if !sendHolding(s, s.turn, struct{}{}) {
		return false
	}
	defer func() { <-s.turn }()
	if !sendHolding(s, s.out, msg) {
		return false
	}
	c.delivered = true
	s.inflight = c
	s.logger.Trace("Message delivered", logFields)

	for {
		select {
		case <-msg.Acked():
			s.inflight = nil
			s.addAck(c)
			s.logger.Trace("Message acked", logFields)
			return true
		case <-msg.Nacked():
			s.inflight = nil
			s.nack(c, msg)
			s.logger.Trace("Message nacked", logFields)
			return true
		case <-s.heartbeat.C:
			s.extendLeases()
		case <-s.ackTimer.C:
			s.confirmAcks()
		case <-s.ctx.Done():
			return s.finishedAnyway(c, msg)
		}
	}
}

// sendHolding sends v on ch while keeping the subscription's leases and acks going. It returns
// false when the subscription stops first.
func sendHolding[T any](s *subscription, ch chan<- T, v T) bool {
	for {
		select {
		case ch <- v:
			return true
		case <-s.heartbeat.C:
			s.extendLeases()
		case <-s.ackTimer.C:
			s.confirmAcks()
		case <-s.ctx.Done():
			return false
		}
	}
}

// finishedAnyway handles an Ack or Nack that raced with the end of the subscription (select
// picks among ready cases at random): it reports whether msg was finished after all.
func (s *subscription) finishedAnyway(c *claimed, msg *message.Message) bool {
	select {
	case <-msg.Acked():
		s.inflight = nil
		s.addAck(c)
		return true
	case <-msg.Nacked():
		s.inflight = nil
		s.nack(c, msg)
		return true
	default:
		return false
	}
}

// addAck queues an ack for the next claim, heartbeat or ackDelay, whichever comes first.
func (s *subscription) addAck(c *claimed) {
	if len(s.acks) == 0 {
		s.ackTimer.Reset(ackDelay)
	}
	s.acks = append(s.acks, c)
}

// confirmAcks sends the queued acks to Redis; on failure they stay queued for the next try.
func (s *subscription) confirmAcks() {
	if len(s.acks) == 0 {
		return
	}
	ctx, cancel := s.callContext()
	defer cancel()
	if err := s.confirmAcksWithin(ctx, s.sub.store); err != nil {
		s.logger.Error("Ack failed, will retry", err, watermill.LogFields{"acks": len(s.acks)})
		s.ackTimer.Reset(ackDelay)
	}
}

// confirmAcksWithin sends the queued acks through st, bounded by ctx; on failure they stay
// queued.
func (s *subscription) confirmAcksWithin(ctx context.Context, st store) error {
	if len(s.acks) == 0 {
		return nil
	}
	refused, err := st.ack(ctx, s.part, s.group, s.acks)
	if err != nil {
		return err
	}
	s.acksConfirmed(refused)
	return nil
}

// acksConfirmed clears the queued acks after Redis processed them and logs the refused ones.
func (s *subscription) acksConfirmed(refused []string) {
	if len(refused) > 0 {
		gone := map[string]bool{}
		for _, id := range refused {
			gone[id] = true
		}
		for _, c := range s.acks {
			if gone[c.id] {
				s.logger.Info("Ack refused: the lease had expired and the message was claimed again", watermill.LogFields{"message_uuid": c.uuid, "attempt": c.attempt})
			}
		}
	}
	s.acks = s.acks[:0]
	s.ackTimer.Stop()
}

// nack makes a nacked message due again: after NackBackoff, or at the time its delay metadata
// now names if the handler (for example middleware.DelayOnError) changed that metadata. When the
// handler changed the message, the change is stored too. A message nacked on its last attempt
// becomes a dead letter.
func (s *subscription) nack(c *claimed, msg *message.Message) {
	cfg := s.sub.config
	delivered := withoutDeliveryMetadata(msg)
	if s.exhausted(c.attempt) {
		s.deadLetter(c, delivered, DeadLetterReasonNacked)
		return
	}
	wait := cfg.NackBackoff.NackDelay(int(c.attempt))
	var changed []byte
	original, err := cfg.Marshaler.Unmarshal(s.topic, c.data)
	if err == nil && !sameMessage(original, delivered) {
		if original.Metadata.Get(delay.DelayedUntilKey) != delivered.Metadata.Get(delay.DelayedUntilKey) ||
			original.Metadata.Get(delay.DelayedForKey) != delivered.Metadata.Get(delay.DelayedForKey) {
			if d, err := DelayOf(delivered, time.Now()); err == nil {
				wait = d
			} else {
				s.logger.Error("Ignoring invalid delay metadata set before Nack; using the nack backoff", err, watermill.LogFields{"message_uuid": msg.UUID})
			}
		}
		if data, err := cfg.Marshaler.Marshal(s.topic, delivered); err == nil {
			changed = data
		} else {
			s.logger.Error("Cannot store the changes made before Nack", err, watermill.LogFields{"message_uuid": msg.UUID})
		}
	}

	ctx, cancel := s.callContext()
	defer cancel()
	switch err := s.sub.store.nack(ctx, s.part, s.group, c, wait, changed); {
	case errors.Is(err, errLeaseLost):
		s.logger.Info("Nack refused: the lease had expired and the message was claimed again", watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.attempt})
	case err != nil:
		// The message keeps its lease and comes back when the lease expires.
		s.logger.Error("Nack failed; the message is delivered again after its lease", err, watermill.LogFields{"message_uuid": msg.UUID})
	}
}

func sameMessage(a, b *message.Message) bool {
	return a.UUID == b.UUID && bytes.Equal(a.Payload, b.Payload) && maps.Equal(a.Metadata, b.Metadata)
}

// extendLeases is the heartbeat: it confirms queued acks and extends the leases of every
// message the subscription still holds. Messages whose lease was lost meanwhile are dropped
// from the prefetch buffer, so they are not delivered twice.
func (s *subscription) extendLeases() {
	s.confirmAcks()
	held := s.held()
	if len(held) == 0 {
		return
	}
	ctx, cancel := s.callContext()
	defer cancel()
	lost, err := s.sub.store.extend(ctx, s.part, s.group, s.sub.config.LeaseTimeout, held)
	if err != nil {
		s.logger.Error("Lease extension failed, will retry", err, watermill.LogFields{"held": len(held)})
		return
	}
	if len(lost) == 0 {
		return
	}
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
	}
	if s.inflight != nil && gone[s.inflight.id] {
		s.logger.Info("Lease lost while the handler runs; the message belongs to another consumer now", watermill.LogFields{"message_uuid": s.inflight.uuid, "attempt": s.inflight.attempt})
	}
	kept := s.pending[:0]
	for _, c := range s.pending {
		if !gone[c.id] {
			kept = append(kept, c)
		}
	}
	s.pending = kept
}

func (s *subscription) held() []*claimed {
	held := s.pending
	if s.inflight != nil {
		held = append([]*claimed{s.inflight}, held...)
	}
	return held
}

// backoff logs a failed Redis call and waits before the next try.
func (s *subscription) backoff(err error, what string) {
	wait := s.retry.NextBackOff()
	s.logger.Error("Redis call failed, retrying", err, watermill.LogFields{"operation": what, "retry_in": wait.String()})
	select {
	case <-time.After(wait):
	case <-s.ctx.Done():
	}
}

// stop confirms queued acks and releases every message still held, and those of a claim whose
// reply was lost, all within one OperationTimeout; what it cannot release comes back when its
// lease expires. When the application closed the Redis client first, it does so over a
// short-lived client of its own built from the same options (see closedClientFallback).
func (s *subscription) stop() {
	held := s.held()
	ctx, cancel := context.WithTimeout(context.Background(), s.sub.config.OperationTimeout)
	defer cancel()
	st := s.sub.store
	err := s.finish(ctx, st, held)
	if errors.Is(err, redis.ErrClosed) {
		if fallback := closedClientFallback(st.client); fallback != nil {
			defer func() { _ = fallback.Close() }()
			st.client = fallback
			err = s.finish(ctx, st, held)
		}
	}
	if err != nil {
		s.logger.Error("Release on close failed; unconfirmed acks and held messages are delivered again after their lease", err, watermill.LogFields{"held": len(held), "acks": len(s.acks)})
	}
	s.pending, s.inflight, s.acks = nil, nil, nil
	s.logger.Debug("Subscription stopped", watermill.LogFields{"released": len(held)})
}

// finish confirms the queued acks and releases held through st, bounded by ctx.
func (s *subscription) finish(ctx context.Context, st store, held []*claimed) error {
	ackErr := s.confirmAcksWithin(ctx, st)
	return errors.Join(ackErr, st.release(ctx, s.part, s.group, s.claim, held))
}

// closedClientFallback returns a new client with the options of client, when client is a
// *redis.Client or *redis.ClusterClient (else nil). Applications often close the Redis client
// before the Subscriber (watermill-redisstream closes the client it is given); the last acks
// and releases then go over this client, so that an acked message does not come back.
func closedClientFallback(client redis.UniversalClient) redis.UniversalClient {
	switch c := client.(type) {
	case *redis.Client:
		return redis.NewClient(c.Options())
	case *redis.ClusterClient:
		return redis.NewClusterClient(c.Options())
	}
	return nil
}

// setDeliveryMetadata sets the keys a delivery carries: the attempt, the due time, and the
// delay metadata that due time served (see ServedDelayMetadataKey).
func (s *subscription) setDeliveryMetadata(msg *message.Message, c *claimed) {
	msg.Metadata.Set(AttemptMetadataKey, strconv.FormatInt(c.attempt, 10))
	msg.Metadata.Set(DueTimeMetadataKey, time.UnixMicro(c.dueUs).UTC().Format(dueTimeLayout))
	until, delayFor := msg.Metadata.Get(delay.DelayedUntilKey), msg.Metadata.Get(delay.DelayedForKey)
	if until != "" || delayFor != "" {
		msg.Metadata.Set(ServedDelayMetadataKey, servedDelay(until, delayFor))
	}
}
