package redisdelay

// This file owns leaseBook, the state that mirrors what a consumer holds in Redis: its leases,
// the acks waiting to be confirmed and the nacks a stop cut short.

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// ackDelay is the longest an ack waits to be confirmed to Redis when no claim or heartbeat
// carries it earlier. Batching acks saves round trips; the delay bounds the duplicates a crash
// can cause.
const ackDelay = 50 * time.Millisecond

// claimed is one message a subscription holds a lease on, and what the subscription knows of
// it.
type claimed struct {
	store.Claimed
	claimedUs int64  // the Redis clock of the claim that leased it, Unix µs (ClaimResult.ClaimedUs)
	uuid      string // the message UUID, once decoded, for logs
	delivered bool   // handed to the application
	lost      bool   // its lease was found lost before it was handed out: it never will be
	// holdUntil is when, on the local clock, a message claimed ahead of its due time may be
	// handed out (see claimedOf); zero for one claimed once due.
	holdUntil time.Time

	// opts are the message's options, read once when it is decoded (receivedOptions); nil when
	// it has none, so that a plain message's claim holds nothing more (see options).
	opts *received
}

// options returns the options of c's message read when it was decoded; the zero value when it
// has none.
func (c *claimed) options() received {
	if c.opts == nil {
		return received{}
	}
	return *c.opts
}

// claimedOf wraps the messages of claim res; rc has observed its reply.
func claimedOf(res store.ClaimResult, rc *redisClock) []*claimed {
	out := make([]*claimed, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = &claimed{Claimed: m, claimedUs: res.ClaimedUs}
		if m.DueUs > res.NowUs {
			out[i].holdUntil = rc.localAt(m.DueUs) // claimed ahead
		}
	}
	return out
}

// leasesOf returns the leases of cs, as the store takes them.
func leasesOf(cs []*claimed) []store.Lease {
	out := make([]store.Lease, len(cs))
	for i, c := range cs {
		out[i] = c.Lease
	}
	return out
}

// heldOf returns cs as a stopping subscription gives them back: with their due time, and
// whether they were handed out.
func heldOf(cs []*claimed) []store.Held {
	out := make([]store.Held, len(cs))
	for i, c := range cs {
		out[i] = store.Held{Lease: c.Lease, DueUs: c.DueUs, Delivered: c.delivered}
	}
	return out
}

// leaseBook owns the state of one subscription that mirrors its leases in Redis: the messages
// it claimed and has not handed out (in due order), the one in flight, the acks not yet
// confirmed, the nacks that the subscription's stop cut short, and the two timers that keep them: the heartbeat, which extends every lease it
// holds, and the ack timer, which confirms acks ackDelay after the first unconfirmed one. It
// makes no Redis call: the subscription tells it what Redis answered. One goroutine uses it, so
// it has no lock.
type leaseBook struct {
	pending []*claimed
	// handing is the message taken from pending and being handed out, which may wait for the
	// turn of its Subscribe call behind another partition's handler: its lease is kept too.
	handing  *claimed
	inflight *claimed
	acks     []*claimed
	// extendedAt is when the leases of every held message were last set, by their claim or a
	// successful extension (the client clock before the call: the deadlines are at least
	// LeaseTimeout after it).
	extendedAt time.Time
	// nacks are nacked messages whose nack call the stop of the subscription cancelled: Redis
	// may still hold their lease, so the final release sends them again.
	nacks []unsentNack

	heartbeat *time.Ticker
	ackTimer  *time.Timer

	// count is a counter shared with the other books of the Subscriber, for its worker record:
	// it holds the sum of their held messages; counted is this book's share (see recount).
	count   *atomic.Int64
	counted int64
}

// newLeaseBook returns an empty book whose heartbeat ticks every lease/3 and that keeps its
// share of count, the messages the Subscriber holds.
func newLeaseBook(lease time.Duration, count *atomic.Int64) *leaseBook {
	b := &leaseBook{heartbeat: time.NewTicker(lease / 3), ackTimer: time.NewTimer(time.Hour), count: count}
	b.ackTimer.Stop()
	return b
}

// recount brings the book's share of count up to date after a change of what it holds: one
// atomic add, no lock, for the worker record's in-flight count.
func (b *leaseBook) recount() {
	n := int64(len(b.pending))
	for _, c := range []*claimed{b.inflight, b.handing} {
		if c != nil {
			n++
		}
	}
	if n != b.counted {
		b.count.Add(n - b.counted)
		b.counted = n
	}
}

// stop stops the timers.
func (b *leaseBook) stop() {
	b.heartbeat.Stop()
	b.ackTimer.Stop()
}

// claimed records a claim's messages, in due order, to be handed out; the claim was sent at
// sent, so their leases last at least LeaseTimeout from then.
func (b *leaseBook) claimed(msgs []*claimed, sent time.Time) {
	if len(b.pending) == 0 && b.handing == nil && b.inflight == nil {
		b.extendedAt = sent
	}
	// A claim made while messages it claimed ahead wait (see deliverPending) may take
	// messages due before some of them: the queue stays in due-time order.
	merge := len(b.pending) > 0
	b.pending = append(b.pending, msgs...)
	if merge {
		slices.SortStableFunc(b.pending, func(a, c *claimed) int { return cmp.Compare(a.DueUs, c.DueUs) })
	}
	b.recount()
}

// hasPending reports whether claimed messages wait to be handed out.
func (b *leaseBook) hasPending() bool { return len(b.pending) > 0 }

// extended records a successful extension of every held lease, sent at sent.
func (b *leaseBook) extended(sent time.Time) { b.extendedAt = sent }

// next takes the next message to hand out, or nil; it is held as handing until it is handed
// out, put back or finished.
func (b *leaseBook) next() *claimed {
	if len(b.pending) == 0 {
		return nil
	}
	c := b.pending[0]
	b.pending = b.pending[1:]
	b.handing = c
	return c
}

// putBack returns a message that was taken but not handed out to the queue, before the first
// message due after it: the head, unless a claim that arrived meanwhile brought messages due
// before it (see deliverPending).
func (b *leaseBook) putBack(c *claimed) {
	b.handing = nil
	i := 0
	for i < len(b.pending) && b.pending[i].DueUs < c.DueUs {
		i++
	}
	b.pending = slices.Insert(b.pending, i, c)
}

// handedOut records c as the message in flight: from now on its attempt counts.
func (b *leaseBook) handedOut(c *claimed) {
	c.delivered = true
	b.handing = nil
	b.inflight = c
}

// dropLost forgets c, taken to be handed out, whose lease was lost: it is neither handed out
// nor released.
func (b *leaseBook) dropLost(c *claimed) {
	if b.handing == c {
		b.handing = nil
	}
	b.recount()
}

// acked queues c's ack (the message in flight, or one the subscription finished without
// handing it out) and starts the ack timer for the first one.
func (b *leaseBook) acked(c *claimed) {
	if b.inflight == c {
		b.inflight = nil
	}
	if b.handing == c {
		b.handing = nil
	}
	if len(b.acks) == 0 {
		b.ackTimer.Reset(ackDelay)
	}
	b.acks = append(b.acks, c)
	b.recount()
}

// finished records that c is no longer held by this subscription (nacked or dead-lettered).
func (b *leaseBook) finished(c *claimed) {
	if b.inflight == c {
		b.inflight = nil
	}
	if b.handing == c {
		b.handing = nil
	}
	b.recount()
}

// unsentNack is a nack to send again: the message and the decided delay and changes.
type unsentNack struct {
	c       *claimed
	delay   time.Duration
	changed []byte
}

// nackCutShort records a nack of c (already finished) whose call the stop of the subscription
// cancelled, to be sent again when the subscription releases what it holds.
func (b *leaseBook) nackCutShort(n unsentNack) { b.nacks = append(b.nacks, n) }

// nackSent drops the first unsent nack once Redis processed it.
func (b *leaseBook) nackSent() { b.nacks = b.nacks[1:] }

// acksConfirmed clears the queued acks after Redis processed them and returns those it
// refused because their lease had been lost (fencing).
func (b *leaseBook) acksConfirmed(refused []string) []*claimed {
	lost := refusedOf(b.acks, refused)
	b.acks = b.acks[:0]
	b.ackTimer.Stop()
	return lost
}

// ackRetry restarts the ack timer after a confirmation failed; the acks stay queued.
func (b *leaseBook) ackRetry() { b.ackTimer.Reset(ackDelay) }

// takeAcks removes the queued acks from the book for a confirmation of their own (see
// partitionConsumer.sendAcks) and stops the ack timer.
func (b *leaseBook) takeAcks() []*claimed {
	acks := b.acks
	b.acks = nil
	b.ackTimer.Stop()
	return acks
}

// ackUnsent queues acks again, before those queued since, after their confirmation failed, and
// restarts the ack timer.
func (b *leaseBook) ackUnsent(acks []*claimed) {
	b.acks = append(acks, b.acks...)
	b.ackTimer.Reset(ackDelay)
}

// refusedOf returns the acks among acks that Redis refused (refused holds their IDs).
func refusedOf(acks []*claimed, refused []string) []*claimed {
	var lost []*claimed
	for _, c := range acks {
		if slices.Contains(refused, c.ID) {
			lost = append(lost, c)
		}
	}
	return lost
}

// held returns every message whose lease the subscription keeps: the one in flight first, then
// the one being handed out, then those waiting to be handed out.
func (b *leaseBook) held() []*claimed {
	held := make([]*claimed, 0, 2+len(b.pending))
	for _, c := range []*claimed{b.inflight, b.handing} {
		if c != nil {
			held = append(held, c)
		}
	}
	return append(held, b.pending...)
}

// leasesLost drops the waiting messages whose lease Redis reported lost, so that they are not
// handed out twice, marks the one being handed out lost, and returns the message in flight if
// its lease was lost too.
func (b *leaseBook) leasesLost(ids []string) (inflight *claimed) {
	b.pending = slices.DeleteFunc(b.pending, func(c *claimed) bool { return slices.Contains(ids, c.ID) })
	defer b.recount()
	if b.handing != nil && slices.Contains(ids, b.handing.ID) {
		b.handing.lost = true
	}
	if b.inflight != nil && slices.Contains(ids, b.inflight.ID) {
		return b.inflight
	}
	return nil
}

// clear forgets everything, once the subscription released what it held.
func (b *leaseBook) clear() {
	b.pending, b.handing, b.inflight, b.acks, b.nacks = nil, nil, nil, nil, nil
	b.recount()
}
