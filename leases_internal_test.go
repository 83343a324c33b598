package redisdelay

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// claimedAt is a claimed message of ID id, first attempt, due at dueUs.
func claimedAt(id string, dueUs int64) *claimed {
	return &claimed{Claimed: store.Claimed{Lease: store.Lease{ID: id, Attempt: 1}, DueUs: dueUs}}
}

// handOutAll hands out and acks every message the book b has queued, and returns their IDs in
// the order it handed them out.
func handOutAll(b *leaseBook) []string {
	var order []string
	for c := b.next(); c != nil; c = b.next() {
		order = append(order, c.ID)
		b.handedOut(c)
		b.acked(c)
	}
	return order
}

// TestAClaimMadeWhileMessagesWaitKeepsTheQueueInDueOrder: a claim made while messages claimed
// ahead wait (see deliverPending) may take a message due before some of them; the queue hands
// them out in due-time order, equal due times in claim order.
func TestAClaimMadeWhileMessagesWaitKeepsTheQueueInDueOrder(t *testing.T) {
	var count atomic.Int64
	b := newLeaseBook(time.Minute, &count)
	defer b.stop()
	b.claimed([]*claimed{claimedAt("a", 10), claimedAt("b", 30)}, time.Now())
	first := b.next()
	b.putBack(first) // held, and a claim goes out first
	b.claimed([]*claimed{claimedAt("c", 20), claimedAt("d", 30), claimedAt("e", 40)}, time.Now())
	assert.Equal(t, []string{"a", "c", "b", "d", "e"}, handOutAll(b))
	assert.Zero(t, count.Load(), "nothing is left counted as held")
}

// TestAMessagePutBackAfterAClaimGoesAfterTheMessagesDueBeforeIt: the claim's reply arrives
// while the queue's head is taken and held (see holdWatching); it brings a message due before
// the head, which is handed out first once the head is put back.
func TestAMessagePutBackAfterAClaimGoesAfterTheMessagesDueBeforeIt(t *testing.T) {
	var count atomic.Int64
	b := newLeaseBook(time.Minute, &count)
	defer b.stop()
	b.claimed([]*claimed{claimedAt("a", 10), claimedAt("b", 30)}, time.Now())
	held := b.next()
	b.claimed([]*claimed{claimedAt("z", 5), claimedAt("c", 10), claimedAt("d", 20)}, time.Now())
	b.putBack(held)
	assert.Equal(t, []string{"z", "a", "c", "d", "b"}, handOutAll(b))
	assert.Zero(t, count.Load(), "nothing is left counted as held")
}
