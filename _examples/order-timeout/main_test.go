package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// TestAnUnpaidOrderIsCancelledAtExactlyItsDelayAndAPaidOrdersCheckNeverRuns runs the example's
// order service on the test kit, with the 30-minute delay of production, in virtual time.
func TestAnUnpaidOrderIsCancelledAtExactlyItsDelayAndAPaidOrdersCheckNeverRuns(t *testing.T) {
	ctx := context.Background()
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	ex := newExample(options{orders: 2, delay: 30 * time.Minute}, newTimeline(io.Discard), q.Publisher(), q.Inspector())
	stopRouter, err := startRouter(ctx, q.Subscriber(consumerGroup), ex)
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

// TestTheExampleLeavesABacklogADeadLetterAndASchedule runs, on the test kit, what the example
// leaves in Redis for -keep: the backlog's checks stay scheduled at their windows, the malformed
// check is dead-lettered after maxAttempts, nackBackoff apart, and the nightly schedule is
// stored; readLeftovers, which the example's exit code depends on, agrees.
func TestTheExampleLeavesABacklogADeadLetterAndASchedule(t *testing.T) {
	ctx := context.Background()
	q := redisdelaytest.New(t, redisdelaytest.Options{Subscriber: subscriberConfig("")})
	ex := newExample(options{orders: 2, delay: 30 * time.Minute}, newTimeline(io.Discard), q.Publisher(), q.Inspector())
	stopRouter, err := startRouter(ctx, q.Subscriber(consumerGroup), ex)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopRouter() }()
	sched, err := schedule.New(schedule.Config{Publisher: q.Publisher()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sched.Close() }()
	if err := putReconcileSchedule(ctx, sched, ex.tl); err != nil {
		t.Fatal(err)
	}
	go func() { _ = sched.Run(ctx) }() // as the example does; the kit waits for a Scheduler made on its Publisher

	start := q.Now()
	if err := ex.publishMalformedCheck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ex.placeBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	for n, window := range backlogWindows {
		q.RequireScheduled(t, topic, checkKey(ex.backlogOrderID(n)), start.Add(window))
	}

	// The attempts are at start, start+100ms and start+200ms; the last one dead-letters it.
	q.Advance(time.Duration(maxAttempts-1) * time.Duration(nackBackoff))
	// Dead-lettered by now: the wait returns at once, or fails after its timeout.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dead, err := ex.waitDeadLettered(waitCtx)
	if err != nil {
		t.Fatal(err)
	}
	if dead.Attempt != maxAttempts || dead.Reason != redisdelay.DeadLetterReasonNacked {
		t.Fatalf("the malformed check is a dead letter after %d attempts (%s), want %d (%s)", dead.Attempt, dead.Reason, maxAttempts, redisdelay.DeadLetterReasonNacked)
	}
	if got := len(q.Received(consumerGroup)); got != maxAttempts {
		t.Fatalf("group %s received %d messages, want the malformed check's %d attempts", consumerGroup, got, maxAttempts)
	}

	left, err := readLeftovers(ctx, q.Inspector())
	if err != nil {
		t.Fatal(err)
	}
	if left.scheduled != int64(len(backlogWindows)) || left.deadLetters != 1 || len(left.schedules) != 1 {
		t.Fatalf("left %d scheduled, %d dead letters, %d schedules; want %d, 1, 1", left.scheduled, left.deadLetters, len(left.schedules), len(backlogWindows))
	}
	want := time.Date(start.Year(), start.Month(), start.Day(), 2, 0, 0, 0, time.UTC) // reconcileSpec
	if !want.After(start) {
		want = want.AddDate(0, 0, 1)
	}
	if next := left.schedules[0].Pending; !next.Equal(want) {
		t.Fatalf("the nightly schedule's next tick is %s, want %s", next, want)
	}
}

// TestTheExampleRunsOnMiniredisAndLeavesWhatItPromises runs the whole example, as go run does,
// on the embedded miniredis with the example's own 2-second delay: runExample returns nil only
// when every order was settled as the summary demands and readLeftovers found the backlog, the
// dead letter and the schedule, with the Scheduler and the router wired as in production. (A paid
// order pays halfway through its delay: with 200 ms, a loaded CI machine paid one after its
// check had run.)
func TestTheExampleRunsOnMiniredisAndLeavesWhatItPromises(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	t.Setenv("REDIS_URL", "")
	var out strings.Builder
	err := runExample(context.Background(), options{orders: 3, delay: 2 * time.Second, spread: 100 * time.Millisecond, keep: true}, newTimeline(&out))
	if err != nil {
		t.Fatalf("runExample: %v\n%s", err, out.String())
	}
	for _, want := range []string{"all 3 orders settled", "dead-lettered after 3 attempts", "schedule " + reconcileSchedule + " created", "Scheduler running"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the timeline has no %q:\n%s", want, out.String())
		}
	}
}

// statusOf reads the status of order id.
func statusOf(b *orderBook, id string) orderStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status[id]
}
