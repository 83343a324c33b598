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
