package redisdelay

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

func TestLeaseBookTracksWhatTheSubscriptionHolds(t *testing.T) {
	b := newLeaseBook(time.Hour, new(atomic.Int64))
	defer b.stop()
	m := func(id string) *claimed {
		return &claimed{Claimed: store.Claimed{Lease: store.Lease{ID: id, Attempt: 1}}}
	}
	a, c, d := m("a"), m("c"), m("d")
	b.claimed([]*claimed{a, c, d}, time.Now())
	assert.Equal(t, []*claimed{a, c, d}, b.held())

	got := b.next()
	require.Same(t, a, got)
	b.handedOut(a)
	assert.True(t, a.delivered)
	assert.Equal(t, []*claimed{a, c, d}, b.held(), "the message in flight is held first")

	b.acked(a)
	assert.Equal(t, []*claimed{c, d}, b.held(), "an acked message is no longer held")
	assert.Equal(t, []*claimed{a}, b.acks)
	select {
	case <-b.ackTimer.C:
	case <-time.After(time.Second):
		t.Fatal("the first queued ack starts the ack timer")
	}

	got = b.next()
	b.putBack(got)
	assert.Equal(t, []*claimed{c, d}, b.held(), "a message taken but not handed out goes back first")

	got = b.next()
	b.handedOut(got)
	assert.Same(t, c, b.leasesLost([]string{"c", "d"}), "the lost lease in flight is reported")
	assert.Nil(t, b.next(), "a waiting message whose lease was lost is never handed out")
	b.finished(c)
	assert.Empty(t, b.held())

	refused := b.acksConfirmed([]string{"a"})
	assert.Equal(t, []*claimed{a}, refused, "acks refused by fencing are reported")
	assert.Empty(t, b.acks)
}

func TestLeaseBookClearsConfirmedAcksAndStopsTheTimer(t *testing.T) {
	b := newLeaseBook(time.Hour, new(atomic.Int64))
	defer b.stop()
	x := &claimed{Claimed: store.Claimed{Lease: store.Lease{ID: "x", Attempt: 2}}}
	b.claimed([]*claimed{x}, time.Now())
	b.handedOut(b.next())
	b.acked(x)
	assert.Empty(t, b.acksConfirmed(nil))
	select {
	case <-b.ackTimer.C:
		t.Fatal("confirmed acks leave no timer running")
	case <-time.After(2 * ackDelay):
	}
	b.claimed([]*claimed{{Claimed: store.Claimed{Lease: store.Lease{ID: "y"}}}}, time.Now())
	b.clear()
	assert.Empty(t, b.held())
}

// TestLeaseBookTakesAcksForACallOfTheirOwnAndQueuesThemAgainFirst: the acks taken for an ack
// call of their own (partitionConsumer.sendAcks) leave the book, so that the next claim does not
// carry them, and stop the ack timer; when that call fails they are queued again ahead of those
// acked meanwhile, with the timer running, and refusedOf tells which of them Redis refused.
func TestLeaseBookTakesAcksForACallOfTheirOwnAndQueuesThemAgainFirst(t *testing.T) {
	b := newLeaseBook(time.Hour, new(atomic.Int64))
	defer b.stop()
	msg := func(id string) *claimed {
		return &claimed{Claimed: store.Claimed{Lease: store.Lease{ID: id, Attempt: 1}}}
	}
	x, y, z := msg("x"), msg("y"), msg("z")
	b.claimed([]*claimed{x, y, z}, time.Now())
	for range 2 {
		c := b.next()
		b.handedOut(c)
		b.acked(c)
	}
	sent := b.takeAcks()
	assert.Equal(t, []*claimed{x, y}, sent)
	assert.Empty(t, b.acks, "under way, not queued for the next claim")
	select {
	case <-b.ackTimer.C:
		t.Fatal("acks under way leave no ack timer running")
	case <-time.After(2 * ackDelay):
	}
	b.handedOut(b.next())
	b.acked(z)
	b.ackUnsent(sent)
	assert.Equal(t, []*claimed{x, y, z}, b.acks, "the failed call's acks first")
	b.ackUnsent(b.takeAcks()) // the timer stopped, then queued again with nothing else
	select {
	case <-b.ackTimer.C:
	case <-time.After(10 * ackDelay):
		t.Fatal("acks queued again restart the ack timer")
	}
	assert.Equal(t, []*claimed{y}, refusedOf(sent, []string{"y", "w"}))
}

// TestLeaseBooksShareTheCountOfWhatTheSubscriberHolds checks the count behind the worker
// record's InFlight: the books of a Subscriber's subscriptions add up what each holds (waiting,
// being handed out, in flight), and nothing once they are cleared.
func TestLeaseBooksShareTheCountOfWhatTheSubscriberHolds(t *testing.T) {
	count := new(atomic.Int64)
	one, two := newLeaseBook(time.Hour, count), newLeaseBook(time.Hour, count)
	defer one.stop()
	defer two.stop()
	m := func(id string) *claimed {
		return &claimed{Claimed: store.Claimed{Lease: store.Lease{ID: id, Attempt: 1}}}
	}
	a, c, d, e := m("a"), m("c"), m("d"), m("e")
	one.claimed([]*claimed{a, c, d}, time.Now())
	two.claimed([]*claimed{e}, time.Now())
	assert.EqualValues(t, 4, count.Load())
	one.handedOut(one.next())
	assert.EqualValues(t, 4, count.Load(), "a message handed out is still held")
	one.acked(a)
	assert.EqualValues(t, 3, count.Load(), "an acked message is not")
	one.handedOut(one.next())
	one.finished(c)
	assert.EqualValues(t, 2, count.Load(), "nor a nacked one")
	one.leasesLost([]string{"d"})
	assert.EqualValues(t, 1, count.Load(), "nor one whose lease was lost")
	two.clear()
	assert.Zero(t, count.Load())
}
