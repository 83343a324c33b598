package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// TestAnUnpaidOrderIsCancelledAtExactlyItsDelayAndAPaidOrdersCheckNeverRuns runs the example's
// order service on the test kit, with the 30-minute delay of production, in virtual time.
func TestAnUnpaidOrderIsCancelledAtExactlyItsDelayAndAPaidOrdersCheckNeverRuns(t *testing.T) {
	ctx := context.Background()
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ex := newExample(options{orders: 2, delay: 30 * time.Minute}, newTimeline(io.Discard), q.Publisher(), q.Inspector())
	stopRouter, err := startRouter(ctx, q.Subscriber(consumerGroup), ex.handlePaymentCheck)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopRouter() }()

	start := q.Now()
	for _, id := range []string{"1", "2"} {
		if err := ex.placeOrder(ctx, id); err != nil {
			t.Fatal(err)
		}
		q.RequireScheduled(t, topic, checkKey(id), start.Add(30*time.Minute))
	}

	q.Advance(10 * time.Minute)
	if !ex.orders.pay("1") {
		t.Fatal("order 1 could not be paid after 10 minutes")
	}
	ex.cancelCheck(ctx, "1")
	q.RequireCancelled(t, topic, checkKey("1"))

	q.Advance(20*time.Minute - time.Microsecond)
	if s := statusOf(ex.orders, "2"); s != awaitingPayment {
		t.Fatalf("order 2 is %d a microsecond before its check is due, want awaiting payment", s)
	}
	q.Advance(time.Microsecond)
	if s := statusOf(ex.orders, "2"); s != cancelled {
		t.Fatalf("order 2 is %d at 30 minutes, want cancelled", s)
	}
	if s := statusOf(ex.orders, "1"); s != paid {
		t.Fatalf("order 1 is %d, want paid", s)
	}
	if d := q.RequireReceived(t, topic, consumerGroup, checkKey("2")); !d.At.Equal(start.Add(30 * time.Minute)) {
		t.Fatalf("the check of order 2 ran at %s, want %s", d.At, start.Add(30*time.Minute))
	}
	q.RequireNotReceived(t, topic, consumerGroup, checkKey("1"))
}

// statusOf reads the status of order id.
func statusOf(b *orderBook, id string) orderStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status[id]
}
