package redisdelay

import (
	"bytes"
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"
)

// prefetchWindow bounds how much handler time the claimed-but-not-yet-delivered messages of a
// subscription represent: a slow handler claims few messages at a time, so that its group's
// other consumers can take the rest.
const prefetchWindow = 100 * time.Millisecond

// subscription is one Subscribe call: a single goroutine that claims, delivers, acks and
// releases, so none of its state needs a lock.
type subscription struct {
	sub    *Subscriber
	ctx    context.Context
	topic  string
	group  string
	logger watermill.LoggerAdapter
	out    chan *message.Message

	pending  []*claimed // claimed, not yet delivered, in due order
	inflight *claimed   // delivered, waiting for Ack or Nack
	acks     []*claimed // acked, not yet confirmed to Redis
	limit    int        // how many messages the next claim takes

	heartbeat *time.Ticker
	retry     *backoff.ExponentialBackOff
}

func newSubscription(s *Subscriber, ctx context.Context, topic string, logger watermill.LoggerAdapter) *subscription {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 5 * time.Second
	return &subscription{
		sub:    s,
		ctx:    ctx,
		topic:  topic,
		group:  s.config.ConsumerGroup,
		logger: logger,
		out:    make(chan *message.Message),
		limit:  1,
		retry:  retry,
	}
}

// stopped reports whether the Subscribe context is done or the Subscriber is closing.
func (s *subscription) stopped() bool {
	select {
	case <-s.ctx.Done():
		return true
	case <-s.sub.closing:
		return true
	default:
		return false
	}
}

func (s *subscription) run(registered bool) {
	defer close(s.out)
	cfg := s.sub.config
	s.heartbeat = time.NewTicker(cfg.LeaseTimeout / 3)
	defer s.heartbeat.Stop()

	channel := s.sub.store.keys.group(s.topic, s.group).wakeChannel
	wake := s.sub.wakeups.watch(channel)
	defer s.sub.wakeups.unwatch(channel, wake)
	// Claim only once wake-ups are flowing, so none published in between is missed; the
	// recheck interval covers a confirmation that does not come.
	select {
	case <-wake.ready:
	case <-time.After(cfg.OperationTimeout):
	case <-s.ctx.Done():
	case <-s.sub.closing:
	}

	defer s.stop()
	for !s.stopped() {
		if !registered {
			if err := s.sub.register(s.ctx, s.topic); err != nil {
				s.backoff(err, "register consumer group")
				continue
			}
			registered = true
		}
		res, receivedAt, err := s.claim()
		if err != nil {
			s.backoff(err, "claim")
			continue
		}
		s.retry.Reset()
		if len(res.messages) == 0 {
			s.sleep(res, receivedAt, wake)
			continue
		}
		s.pending = res.messages
		start := time.Now()
		n := s.deliverPending()
		s.adaptLimit(n, time.Since(start))
	}
}

// claim sends the pending acks and claims the next batch in one round trip.
func (s *subscription) claim() (claimResult, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.sub.config.OperationTimeout)
	defer cancel()
	res, err := s.sub.store.claim(ctx, s.topic, s.group, s.limit, s.sub.config.LeaseTimeout, s.acks)
	if err != nil {
		return res, time.Time{}, err
	}
	s.acks = s.acks[:0]
	if res.refusedAcks > 0 {
		s.logger.Info("Acks refused: their leases had expired and the messages were claimed again", watermill.LogFields{"refused": res.refusedAcks})
	}
	if res.vanished > 0 {
		s.logger.Error("Due messages whose stored data had vanished were dropped", nil, watermill.LogFields{"vanished": res.vanished})
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
	wait := s.sub.config.RecheckInterval
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
		case <-s.ctx.Done():
			return
		case <-s.sub.closing:
			return
		}
	}
}

// deliverPending hands the claimed messages out one at a time and returns how many were
// finished (acked or nacked). It returns early when the subscription stops.
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
	msg, err := s.sub.config.Unmarshaler.Unmarshal(s.topic, c.data)
	if err != nil {
		// A message that cannot be decoded would fail every time; it is dropped, loudly.
		s.logger.Error("Dropping stored message that cannot be unmarshaled", err, watermill.LogFields{"id": c.id})
		s.acks = append(s.acks, c)
		return true
	}
	msg.Metadata.Set(AttemptMetadataKey, strconv.FormatInt(c.attempt, 10))
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	msg.SetContext(ctx)
	logFields := watermill.LogFields{"message_uuid": msg.UUID, "attempt": c.attempt}

	for sent := false; !sent; {
		select {
		case s.out <- msg:
			sent = true
		case <-s.heartbeat.C:
			s.extendLeases()
		case <-s.ctx.Done():
			return false
		case <-s.sub.closing:
			return false
		}
	}
	c.delivered = true
	s.inflight = c
	s.logger.Trace("Message delivered", logFields)

	for {
		select {
		case <-msg.Acked():
			s.inflight = nil
			s.acks = append(s.acks, c)
			s.logger.Trace("Message acked", logFields)
			return true
		case <-msg.Nacked():
			s.inflight = nil
			s.nack(c, msg)
			s.logger.Trace("Message nacked", logFields)
			return true
		case <-s.heartbeat.C:
			s.extendLeases()
		case <-s.ctx.Done():
			return false
		case <-s.sub.closing:
			return false
		}
	}
}

// nack makes a nacked message due again: after NackBackoff, or at the time its delay metadata
// now names if the handler (for example middleware.DelayOnError) changed that metadata. When the
// handler changed the message and the Unmarshaler can also marshal, the change is stored too.
func (s *subscription) nack(c *claimed, msg *message.Message) {
	cfg := s.sub.config
	wait := cfg.NackBackoff.NackDelay(int(c.attempt))
	var changed []byte

	delivered := msg.Copy()
	delivered.Metadata = maps.Clone(msg.Metadata)
	delete(delivered.Metadata, AttemptMetadataKey)
	original, err := cfg.Unmarshaler.Unmarshal(s.topic, c.data)
	if err == nil && !sameMessage(original, delivered) {
		if original.Metadata.Get(delay.DelayedUntilKey) != delivered.Metadata.Get(delay.DelayedUntilKey) ||
			original.Metadata.Get(delay.DelayedForKey) != delivered.Metadata.Get(delay.DelayedForKey) {
			if d, err := DelayOf(delivered, time.Now()); err == nil {
				wait = d
			} else {
				s.logger.Error("Ignoring invalid delay metadata set before Nack; using the nack backoff", err, watermill.LogFields{"message_uuid": msg.UUID})
			}
		}
		if m, ok := cfg.Unmarshaler.(Marshaler); ok {
			if data, err := m.Marshal(s.topic, delivered); err == nil {
				changed = data
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.OperationTimeout)
	defer cancel()
	ok, err := s.sub.store.nack(ctx, s.topic, s.group, c, wait, changed)
	switch {
	case err != nil:
		// The message keeps its lease and comes back when the lease expires.
		s.logger.Error("Nack failed; the message is delivered again after its lease", err, watermill.LogFields{"message_uuid": msg.UUID})
	case !ok:
		s.logger.Info("Nack refused: the lease had expired and the message was claimed again", watermill.LogFields{"message_uuid": msg.UUID})
	}
}

func sameMessage(a, b *message.Message) bool {
	return a.UUID == b.UUID && bytes.Equal(a.Payload, b.Payload) && maps.Equal(a.Metadata, b.Metadata)
}

// extendLeases is the heartbeat: it confirms pending acks and extends the leases of every
// message the subscription still holds. Messages whose lease was lost meanwhile are not
// delivered.
func (s *subscription) extendLeases() {
	cfg := s.sub.config
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OperationTimeout)
	defer cancel()
	if refused, err := s.sub.store.ack(ctx, s.topic, s.group, s.acks); err != nil {
		s.logger.Error("Ack failed, will retry", err, nil)
	} else {
		if refused > 0 {
			s.logger.Info("Acks refused: their leases had expired and the messages were claimed again", watermill.LogFields{"refused": refused})
		}
		s.acks = s.acks[:0]
	}
	held := s.held()
	lost, err := s.sub.store.extend(ctx, s.topic, s.group, cfg.LeaseTimeout, held)
	if err != nil {
		s.logger.Error("Lease extension failed, will retry", err, nil)
		return
	}
	if len(lost) == 0 {
		return
	}
	s.logger.Info("Leases lost; those messages belong to another consumer now", watermill.LogFields{"lost": len(lost)})
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
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
	case <-s.sub.closing:
	}
}

// stop confirms pending acks and releases every message still held, bounded by
// OperationTimeout; what it cannot release comes back when its lease expires.
func (s *subscription) stop() {
	cfg := s.sub.config
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OperationTimeout)
	defer cancel()
	if _, err := s.sub.store.ack(ctx, s.topic, s.group, s.acks); err != nil {
		s.logger.Error("Ack on close failed; those messages are delivered again after their lease", err, nil)
	}
	held := s.held()
	if err := s.sub.store.release(ctx, s.topic, s.group, held); err != nil {
		s.logger.Error("Release on close failed; those messages are delivered again after their lease", err, watermill.LogFields{"held": len(held)})
	}
	s.pending, s.inflight, s.acks = nil, nil, nil
	s.logger.Debug("Subscription stopped", watermill.LogFields{"released": len(held)})
}
