// Command order-timeout shows the core use case of a delay queue: cancel an order that is
// still unpaid some time after it was placed, and call off the pending check of an order that
// was paid.
//
// For every order it places, the example schedules a payment check on the topic
// order.payment-check through a redisdelay.Publisher, delayed by setting
// delay.WithContext(ctx, delay.For(d)) on the message context, and keyed by the order with
// redisdelay.WithKey(msg, "order-"+id). A Watermill router consumes the topic through a
// redisdelay.Subscriber of the consumer group "order-service". When a check comes due, its
// handler cancels the order, which is still unpaid.
//
// Every third order is paid halfway through its delay. The payment then calls off the order's
// check by its key with redisdelay.Inspector.Cancel, so that the check is never delivered; the
// timeline prints "check cancelled" with the outcome in the group "order-service" ("applied" when
// the check was removed). The handler keeps a safety check all the same: should a check of a
// paid order ever be delivered, it does nothing to the order and counts it as a paid order's
// check that ran.
//
// A malformed check, with no order ID, is published at the start: the handler rejects it at
// each of its 3 attempts (MaxAttempts 3, 100 ms apart), so it becomes a dead letter of the
// group. The service also puts a nightly schedule, reconcile-unpaid-orders ("0 2 * * *", UTC,
// to the topic order.reconcile, whose handler counts the orders awaiting payment) with package
// schedule, and runs a Scheduler next to its router while it runs. Once the orders are settled
// it places 5 more orders, whose checks are due in 1 hour and 1 day, so that the example leaves
// a backlog.
//
// The output is a timeline, one line per event with the time since the start, followed by a
// summary: how many checks of unpaid orders were delivered, how many checks of paid orders were
// cancelled, how many paid orders' checks ran anyway (must be 0), how many deliveries started
// before their due time (a delay queue must never do that), duplicate deliveries, and how late
// the checks started (p50, p99, max); then what the example leaves in Redis, read with the
// Inspector: the 5 checks scheduled, the dead letter, the schedule. The exit code is 0 when
// every unpaid order's check was delivered, none early, every paid order's check was cancelled
// (Cancel reported "applied" for the group), no paid order's check ran, and Redis holds what the
// example leaves; 1 otherwise. The run waits for these events and gives up after the last due
// time plus 10s.
//
// Run it from the repository root:
//
//	go run ./_examples/order-timeout
//	go run ./_examples/order-timeout -orders 50 -delay 1s -spread 1s
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/order-timeout -keep
//
// Flags:
//
//	-orders N   number of orders to place (default 20)
//	-delay D    how long an order may stay unpaid, a Go duration (default 2s)
//	-spread D   the placements are spread evenly over this time, a Go duration (default 2s)
//	-keep       keep the example's keys in Redis when it ends
//
// Without REDIS_ADDR (or REDIS_URL) the example starts an embedded miniredis. With it, it uses
// that server under the key prefix redisdelay-example-order-timeout:, deleting what an earlier run
// left there, so runs must not overlap. It deletes its keys when it ends, unless run with
// -keep; it prints the redisdelay commands that show what it leaves either way (stats, list of
// the scheduled checks and of the dead letter, show of a check by key and of the dead letter by
// ref, schedules list, dashboard). No Scheduler runs once the example ends, so the schedule's
// next tick waits for one.
// The checks' keys keep no history (the publisher's KeyRetention is 0), so a key is free
// again once its check is acked or cancelled.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

const (
	topic         = "order.payment-check"
	consumerGroup = "order-service"
	// dueMetadataKey carries the instant (Unix µs) at which the publisher expects the check to
	// be due, so that the handler can tell how late it started. It is this example's own key;
	// the queue itself only reads Watermill's delay metadata.
	dueMetadataKey = "example_due_unix_us"
	// payEvery makes every payEvery-th order get paid before its check is due.
	payEvery = 3
	// checkKeyPrefix starts the key of each payment check; the order ID follows. The key is
	// how the payment finds the check again to cancel it.
	checkKeyPrefix = "order-"
	// slack is how long, beyond the last due time, the example waits for the checks.
	slack = 10 * time.Second
)

// options are the command-line flags.
type options struct {
	orders int
	delay  time.Duration
	spread time.Duration
	keep   bool
}

// paymentCheck is the payload of a scheduled check.
type paymentCheck struct {
	OrderID  string    `json:"order_id"`
	PlacedAt time.Time `json:"placed_at"`
}

func main() {
	os.Exit(run())
}

// run is the whole example; it returns the exit code, so that deferred cleanups run first.
func run() int {
	opts, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "order-timeout:", err)
		return 2
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()

	if err := runExample(ctx, opts, newTimeline(os.Stdout)); err != nil {
		// err may join several problems, one a line; each gets its own FAIL line.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "FAIL:", line)
		}
		return 1
	}
	return 0
}

func parseFlags() (options, error) {
	var o options
	flag.IntVar(&o.orders, "orders", 20, "number of orders to place")
	flag.DurationVar(&o.delay, "delay", 2*time.Second, "how long an order may stay unpaid before it is cancelled")
	flag.DurationVar(&o.spread, "spread", 2*time.Second, "the order placements are spread evenly over this time")
	flag.BoolVar(&o.keep, "keep", false, exampleredis.KeepUsage)
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", flag.Args())
	case o.orders < 1:
		return o, fmt.Errorf("-orders is %d, want at least 1", o.orders)
	case o.delay <= 0:
		// Orders are paid halfway through their delay, so the delay must be positive.
		return o, fmt.Errorf("-delay is %s, want > 0", o.delay)
	case o.spread < 0:
		return o, fmt.Errorf("-spread is %s, want >= 0", o.spread)
	}
	return o, nil
}

// runExample connects to Redis, wires the publisher, subscriber, router and Scheduler, runs the
// orders, leaves the backlog, shuts everything down and prints the summary and what it left in
// Redis. It returns an error when the run failed, the summary's verdict included.
func runExample(ctx context.Context, opts options, tl *timeline) (err error) {
	rd, err := exampleredis.Open(ctx, "order-timeout", opts.keep, tl.printf)
	if err != nil {
		return err
	}
	// Deletes the example's keys (unless -keep) and prints how to look at them, last.
	defer func() { err = errors.Join(err, rd.Close(os.Stdout)) }()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: rd.Client, KeyPrefix: rd.Prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	subConfig := subscriberConfig(rd.Prefix)
	subConfig.Client = rd.Client
	sub, err := redisdelay.NewSubscriber(subConfig, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	// The inspector finds a check again by its key; it must use the publisher's key prefix
	// (and partitions, 1 here). It holds no resources: there is nothing to close.
	inspector, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: rd.Client, KeyPrefix: rd.Prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	ex := newExample(opts, tl, pub, inspector)
	stop, err := startService(ctx, sub, pub, ex)
	if err != nil {
		return err
	}
	deadRef, runErr := ex.run(ctx)
	closeErr := errors.Join(stop(), pub.Close(), sub.Close())
	ex.payments.Wait()
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("Scheduler, router, publisher and subscriber closed")
	}
	summaryErr := ex.stats.summarize(os.Stdout)
	left, leftErr := readLeftovers(ctx, inspector)
	fmt.Printf("\nleft in Redis\n%s", left.describe())
	if !opts.keep {
		deadRef = "" // deleted: the next run's dead letter has another ref
	}
	addLooks(rd, checkKey(ex.backlogOrderID(0)), deadRef)
	return errors.Join(runErr, summaryErr, leftErr, closeErr)
}

// startService starts the order service: it registers the consumer group, as a service would
// at start-up, before the first publish (messages published to a topic with no group at all
// would wait for the first group anyway; a group registered after others gets only what is
// published after it registered), runs the router, puts the nightly schedule and runs a
// Scheduler. The returned function stops the Scheduler and the router.
func startService(ctx context.Context, sub *redisdelay.Subscriber, pub *redisdelay.Publisher, ex *example) (func() error, error) {
	if err := sub.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	stopRouter, err := startRouter(ctx, sub, ex)
	if err != nil {
		return nil, err
	}
	ex.tl.printf("router running: group %q consumes %q and %q", consumerGroup, topic, reconcileTopic)
	stopScheduler, err := startScheduler(ctx, pub, ex.tl)
	if err != nil {
		return nil, errors.Join(err, stopRouter())
	}
	// The router closes the subscriber as well; Close is idempotent, so the caller closing it
	// too is harmless and makes the shutdown explicit.
	return func() error { return errors.Join(stopScheduler(), stopRouter()) }, nil
}

// startScheduler puts the nightly schedule and runs a Scheduler, as the order service would
// next to its router, so that its ticks are published while the service runs. The returned
// function closes the Scheduler and waits for Run to return.
func startScheduler(ctx context.Context, pub *redisdelay.Publisher, tl *timeline) (func() error, error) {
	// One tick at a time is plenty for one schedule.
	sched, err := schedule.New(schedule.Config{Publisher: pub, Concurrency: 1}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	if err := putReconcileSchedule(ctx, sched, tl); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	tl.printf("Scheduler running")
	return func() error {
		err := errors.Join(sched.Close(), <-done)
		if errors.Is(err, schedule.ErrClosed) {
			return nil // closed before Run started: nothing ran
		}
		return err
	}, nil
}

// run publishes the malformed check, places the orders, waits for their checks, then places
// the backlog and waits for the malformed check to be dead-lettered. It returns the dead
// letter's ref.
func (e *example) run(ctx context.Context) (string, error) {
	if err := e.publishMalformedCheck(ctx); err != nil {
		return "", err
	}
	if err := e.placeAndWait(ctx); err != nil {
		return "", err
	}
	if err := e.placeBacklog(ctx); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, slack)
	defer cancel()
	dead, err := e.waitDeadLettered(ctx)
	return dead.Ref, err
}

// startRouter runs a router with the order service's handlers, of the payment checks and of
// the nightly reconciliation, and returns once it is running. The returned function closes the
// router and waits for Run to return.
func startRouter(ctx context.Context, sub message.Subscriber, e *example) (func() error, error) {
	// The router's info logs would drown the timeline; the example prints its own lines.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddConsumerHandler("cancel-unpaid-orders", topic, sub, e.handlePaymentCheck)
	router.AddConsumerHandler(reconcileSchedule, reconcileTopic, sub, e.reconcileUnpaidOrders)

	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, fmt.Errorf("router stopped before it was running: %v", err)
	}
	return func() error {
		err := router.Close()
		return errors.Join(err, <-done)
	}, nil
}

// example is the order service: it places orders, takes payments (calling off the payment
// checks of the paid orders) and handles payment checks.
type example struct {
	opts      options
	tl        *timeline
	pub       *redisdelay.Publisher
	inspector *redisdelay.Inspector
	orders    *orderBook
	stats     *checkStats
	payments  sync.WaitGroup // the goroutines that pay orders
}

func newExample(opts options, tl *timeline, pub *redisdelay.Publisher, inspector *redisdelay.Inspector) *example {
	return &example{
		opts:      opts,
		tl:        tl,
		pub:       pub,
		inspector: inspector,
		orders:    newOrderBook(),
		stats:     newCheckStats(opts.orders),
	}
}

// orderID is the ID of the i-th order (from 1).
func orderID(i int) string {
	return strconv.Itoa(i)
}

// willPay reports whether the i-th order is paid before its check is due.
func willPay(i int) bool {
	return i%payEvery == 0
}

// checkKey is the key of the payment check of order id.
func checkKey(id string) string {
	return checkKeyPrefix + id
}

// placeAndWait places the orders, then waits until every order was settled (the check of each
// unpaid order delivered, the cancellation of each paid order's check answered), the deadline
// passed or ctx was cancelled (Ctrl-C).
func (e *example) placeAndWait(ctx context.Context) error {
	deadline := time.Now().Add(e.opts.spread + e.opts.delay + slack)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel() // also stops payments still waiting when the run ends early

	if err := e.placeOrders(ctx); err != nil {
		return err
	}
	select {
	case <-e.stats.allSettled:
		e.tl.printf("all %d orders settled", e.opts.orders)
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("gave up waiting for the payment checks and cancellations after %s", e.opts.spread+e.opts.delay+slack)
		}
		return errors.New("interrupted")
	}
}

// placeOrders places the orders at even offsets from now, so that their checks come due at
// different times, and has every payEvery-th order paid before its check is due.
func (e *example) placeOrders(ctx context.Context) error {
	start := time.Now()
	step := time.Duration(0)
	if e.opts.orders > 1 {
		step = e.opts.spread / time.Duration(e.opts.orders-1)
	}
	for i := 1; i <= e.opts.orders; i++ {
		// Sleeping until a fixed offset from start, rather than step after the previous order,
		// keeps publish latencies from adding up.
		if err := sleepUntil(ctx, start.Add(time.Duration(i-1)*step)); err != nil {
			return err
		}
		id := orderID(i)
		if err := e.placeOrder(ctx, id); err != nil {
			return err
		}
		if willPay(i) {
			e.payLater(ctx, id, e.opts.delay/2)
		}
	}
	return nil
}

// placeOrder records a new order and schedules its payment check e.opts.delay from now, keyed by
// the order.
func (e *example) placeOrder(ctx context.Context, id string) error {
	return e.placeOrderWithin(ctx, id, e.opts.delay)
}

// placeOrderWithin records a new order and schedules its payment check window from now, keyed
// by the order.
func (e *example) placeOrderWithin(ctx context.Context, id string, window time.Duration) error {
	placedAt := time.Now()
	e.orders.place(id)
	payload, err := json.Marshal(paymentCheck{OrderID: id, PlacedAt: placedAt})
	if err != nil {
		return err
	}
	// The key names the order's check on the topic, so that a payment can cancel it.
	msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), payload), checkKey(id))
	// Taken before delay.For and before Publish reads the Redis clock, so the queue's own due
	// time is never earlier than this one: a check that starts before it was delivered early.
	due := time.Now().Add(window)
	msg.Metadata.Set(dueMetadataKey, strconv.FormatInt(due.UnixMicro(), 10))
	msg.SetContext(delay.WithContext(ctx, delay.For(window)))
	outcomes, err := e.pub.PublishWithResult(topic, msg)
	if err != nil {
		return fmt.Errorf("schedule the payment check of order %s: %w", id, err)
	}
	// A run starts from an empty key prefix, so no other check can hold the key: anything but
	// Scheduled means this order would have no check of its own.
	if outcomes[0] != redisdelay.OutcomeScheduled {
		return fmt.Errorf("schedule the payment check of order %s: key %s: %s", id, checkKey(id), outcomes[0])
	}
	e.tl.printf("order %s placed, payment check %s due in %s, at %s", id, checkKey(id), shortDuration(window), e.tl.offset(due))
	return nil
}

// payLater pays order id after wait, in the background, unless ctx ends first, then cancels
// the order's payment check by its key.
func (e *example) payLater(ctx context.Context, id string, wait time.Duration) {
	e.payments.Add(1)
	go func() {
		defer e.payments.Done()
		if sleepUntil(ctx, time.Now().Add(wait)) != nil {
			return
		}
		if !e.orders.pay(id) {
			e.tl.printf("order %s payment refused: already cancelled", id)
			e.stats.cancelFailed(id, "payment refused: the order was already cancelled")
			return
		}
		e.tl.printf("order %s paid", id)
		e.cancelCheck(ctx, id)
	}()
}

// cancelCheck calls off the payment check of order id, which was just paid, and records the
// outcome in the consumer group.
func (e *example) cancelCheck(ctx context.Context, id string) {
	res, err := e.inspector.Cancel(ctx, topic, redisdelay.ByKey(checkKey(id)))
	if err != nil {
		// The check stays scheduled; the handler's safety check still keeps the paid order.
		e.tl.printf("order %s check not cancelled: %v", id, err)
		e.stats.cancelFailed(id, err.Error())
		return
	}
	outcome := res.Groups[consumerGroup]
	switch {
	case outcome == redisdelay.OutcomeApplied:
		e.tl.printf("order %s check cancelled (%s)", id, describeGroups(res))
		e.stats.checkCancelled(id)
	case res.Applied():
		// Taken effect elsewhere only, e.g. in the parked messages, never in our group.
		e.tl.printf("order %s check cancelled, but not in group %q (%s)", id, consumerGroup, describeGroups(res))
		e.stats.cancelFailed(id, fmt.Sprintf("Cancel: %s", describeGroups(res)))
	default:
		// In flight (the check is running now), finished (it ran already) or not found.
		e.tl.printf("order %s check cancel did not take effect (%s)", id, describeGroups(res))
		e.stats.cancelFailed(id, fmt.Sprintf("Cancel: %s", describeGroups(res)))
	}
}

// describeGroups lists the outcome of an operation by key in each consumer group, such as
// "group order-service: done".
func describeGroups(res redisdelay.ActionResult) string {
	if len(res.Groups) == 0 {
		return "no consumer group"
	}
	parts := make([]string, 0, len(res.Groups))
	for _, group := range slices.Sorted(maps.Keys(res.Groups)) {
		name := "group " + group
		if group == redisdelay.ParkedGroup {
			name = "parked"
		}
		parts = append(parts, name+": "+res.Groups[group].String())
	}
	return strings.Join(parts, ", ")
}

// handlePaymentCheck is the router handler: it cancels the order unless it was paid. The check
// of a paid order is cancelled at payment, so the paid case is a safety check that the summary
// counts as a failure. Returning nil acks the message; an error would nack it, and the queue
// would deliver it again later.
func (e *example) handlePaymentCheck(msg *message.Message) error {
	started := time.Now()
	var check paymentCheck
	if err := json.Unmarshal(msg.Payload, &check); err != nil || check.OrderID == "" {
		// A malformed check is nacked: after MaxAttempts it becomes a dead letter, where an
		// operator finds it (redisdelay list --state dead-lettered) and can requeue it once
		// the producer is fixed.
		if err == nil {
			err = errors.New("no order ID")
		}
		e.tl.printf("payment check %s rejected, attempt %s of %d: malformed: %v", msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), maxAttempts, err)
		return fmt.Errorf("payment check %s: malformed payload: %w", msg.UUID, err)
	}
	dueUs, err := strconv.ParseInt(msg.Metadata.Get(dueMetadataKey), 10, 64)
	if err != nil {
		e.tl.printf("dropping payment check of order %s: bad %s: %v", check.OrderID, dueMetadataKey, err)
		return nil
	}
	late := started.Sub(time.UnixMicro(dueUs))

	var outcome string
	was := e.orders.cancelIfUnpaid(check.OrderID)
	switch was {
	case awaitingPayment:
		outcome = "unpaid -> cancelled"
	case paid:
		// Should never happen: the payment cancelled this check. The order stays paid.
		outcome = "PAID order's check ran, nothing to do"
	case cancelled:
		outcome = "already cancelled, nothing to do"
	default:
		outcome = "unknown order, nothing to do"
	}
	note := describeLateness(late)
	if attempt := msg.Metadata.Get(redisdelay.AttemptMetadataKey); attempt != "1" {
		// Delivery is at least once: a check can come again after a crash or an expired lease.
		note += ", attempt " + attempt
	}
	e.stats.record(check.OrderID, late, was == paid)
	e.tl.printf("order %s check: %s (%s)", check.OrderID, outcome, note)
	return nil
}

// reconcileUnpaidOrders handles a tick of the nightly schedule: it counts the orders awaiting
// payment, which a service would compare with its payment provider's records. A tick comes
// during the example only if the run spans 02:00 UTC.
func (e *example) reconcileUnpaidOrders(msg *message.Message) error {
	e.tl.printf("nightly reconciliation, tick %s: %d orders awaiting payment", msg.Metadata.Get(redisdelay.TickTimeMetadataKey), e.orders.count(awaitingPayment))
	return nil
}

// shortDuration formats d as time.Duration does, without a trailing "0m0s" or "0s": "1h",
// "24h", "1h30m", "2s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func describeLateness(late time.Duration) string {
	if late < 0 {
		return "EARLY by " + millis(-late)
	}
	return "late " + millis(late)
}

// millis formats d in milliseconds with 0.1 ms precision.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// sleepUntil waits until t, or returns ctx's error if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// orderStatus is where an order is in its life.
type orderStatus int

const (
	unknownOrder orderStatus = iota
	awaitingPayment
	paid
	cancelled
)

// orderBook is the order service's in-memory state, safe for concurrent use. pay and
// cancelIfUnpaid each check and change an order under one lock, so a payment that races its
// check cannot both succeed and have the order cancelled.
type orderBook struct {
	mu     sync.Mutex
	status map[string]orderStatus
}

func newOrderBook() *orderBook {
	return &orderBook{status: map[string]orderStatus{}}
}

func (b *orderBook) place(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status[id] = awaitingPayment
}

// count returns how many orders have status s.
func (b *orderBook) count(s orderStatus) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, status := range b.status {
		if status == s {
			n++
		}
	}
	return n
}

// pay marks the order paid and reports whether it was still awaiting payment.
func (b *orderBook) pay(id string) bool {
	return b.transition(id, paid) == awaitingPayment
}

// cancelIfUnpaid cancels the order if it is still awaiting payment, and returns the status it
// had: awaitingPayment when it cancelled it.
func (b *orderBook) cancelIfUnpaid(id string) orderStatus {
	return b.transition(id, cancelled)
}

// transition moves the order to status to if it is awaiting payment, and returns the status it
// had (unknownOrder for an order never placed).
func (b *orderBook) transition(id string, to orderStatus) orderStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.status[id]
	if !ok {
		return unknownOrder
	}
	if s == awaitingPayment {
		b.status[id] = to
	}
	return s
}

// checkStats collects what the summary reports, safe for concurrent use. An order is settled
// when its fate is known: for an order left unpaid, the first delivery of its check; for an
// order paid before its check was due, the answer of the Cancel of its check (or the refusal
// of its payment).
type checkStats struct {
	orders     int
	paying     map[string]bool // the orders paid before their check is due
	allSettled chan struct{}   // closed once every order is settled

	mu           sync.Mutex
	settled      map[string]bool
	delivered    map[string]bool   // orders whose check was delivered at least once
	lateness     []time.Duration   // of each order's first delivery
	early        int               // deliveries that started before their due time
	duplicates   int               // deliveries of a check already delivered
	paidRan      map[string]bool   // paid orders whose check was delivered anyway
	cancelled    map[string]bool   // paid orders whose check Cancel removed from the group
	cancelErrors map[string]string // paid orders whose check was not cancelled, and why
}

func newCheckStats(orders int) *checkStats {
	s := &checkStats{
		orders:       orders,
		paying:       map[string]bool{},
		allSettled:   make(chan struct{}),
		settled:      map[string]bool{},
		delivered:    map[string]bool{},
		paidRan:      map[string]bool{},
		cancelled:    map[string]bool{},
		cancelErrors: map[string]string{},
	}
	for i := 1; i <= orders; i++ {
		if willPay(i) {
			s.paying[orderID(i)] = true
		}
	}
	return s
}

// record counts a delivery of orderID's check, which started late after its due time (early
// when negative); paidOrder tells that the order was paid when the check ran.
func (s *checkStats) record(orderID string, late time.Duration, paidOrder bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if late < 0 {
		s.early++
	}
	if paidOrder {
		s.paidRan[orderID] = true
	}
	if s.delivered[orderID] {
		s.duplicates++
		return
	}
	s.delivered[orderID] = true
	s.lateness = append(s.lateness, late)
	if !s.paying[orderID] {
		// A paid order is settled by the Cancel of its check instead.
		s.settleLocked(orderID)
	}
}

// checkCancelled records that the Cancel of paid order orderID's check took effect in the group.
func (s *checkStats) checkCancelled(orderID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelled[orderID] = true
	s.settleLocked(orderID)
}

// cancelFailed records that paid order orderID's check was not cancelled, and why.
func (s *checkStats) cancelFailed(orderID, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelErrors[orderID] = why
	s.settleLocked(orderID)
}

func (s *checkStats) settleLocked(orderID string) {
	if s.settled[orderID] {
		return
	}
	s.settled[orderID] = true
	if len(s.settled) == s.orders {
		close(s.allSettled)
	}
}

// summarize prints the summary to w and returns an error when the run failed: an unpaid
// order's check was not delivered, a check was delivered early, a paid order's check was not
// cancelled, or a paid order's check ran.
func (s *checkStats) summarize(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unpaid := s.orders - len(s.paying)
	deliveredUnpaid := 0
	for id := range s.delivered {
		if !s.paying[id] {
			deliveredUnpaid++
		}
	}
	sorted := slices.Sorted(slices.Values(s.lateness))
	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  orders                        %d (%d left unpaid, %d paid)\n", s.orders, unpaid, len(s.paying))
	fmt.Fprintf(w, "  checks delivered              %d/%d\n", deliveredUnpaid, unpaid)
	fmt.Fprintf(w, "  checks cancelled              %d/%d\n", len(s.cancelled), len(s.paying))
	fmt.Fprintf(w, "  paid orders whose check ran:  %d\n", len(s.paidRan))
	fmt.Fprintf(w, "  early                         %d\n", s.early)
	fmt.Fprintf(w, "  duplicates                    %d\n", s.duplicates)
	fmt.Fprintf(w, "  lateness p50                  %s\n", millis(percentile(sorted, 50)))
	fmt.Fprintf(w, "  lateness p99                  %s\n", millis(percentile(sorted, 99)))
	fmt.Fprintf(w, "  lateness max                  %s\n", millis(percentile(sorted, 100)))

	var errs []error
	if missing := unpaid - deliveredUnpaid; missing > 0 {
		errs = append(errs, fmt.Errorf("%d of %d unpaid orders' payment checks were never delivered", missing, unpaid))
	}
	if s.early > 0 {
		errs = append(errs, fmt.Errorf("%d payment checks started before they were due", s.early))
	}
	for _, id := range slices.Sorted(maps.Keys(s.paying)) {
		switch why, failed := s.cancelErrors[id]; {
		case s.cancelled[id]:
		case failed:
			errs = append(errs, fmt.Errorf("order %s: the payment check was not cancelled: %s", id, why))
		default:
			errs = append(errs, fmt.Errorf("order %s: the payment check was never cancelled (the run ended first)", id))
		}
	}
	if n := len(s.paidRan); n > 0 {
		errs = append(errs, fmt.Errorf("the payment checks of %d paid orders ran: %s", n, strings.Join(slices.Sorted(maps.Keys(s.paidRan)), ", ")))
	}
	if len(errs) == 0 {
		fmt.Fprintf(w, "OK: all %d unpaid orders' checks delivered, none early; all %d paid orders' checks cancelled, none ran\n", unpaid, len(s.paying))
	}
	return errors.Join(errs...)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of ascending values, or 0
// when there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// timeline prints events prefixed with the time since it was created. It is safe for
// concurrent use, and lines come out in the order of their timestamps.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func newTimeline(out io.Writer) *timeline {
	return &timeline{out: out, start: time.Now()}
}

// offset formats at relative to the start of the timeline, such as "+2.412s".
func (t *timeline) offset(at time.Time) string {
	return fmt.Sprintf("+%.3fs", at.Sub(t.start).Seconds())
}

func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%-8s %s\n", t.offset(time.Now()), fmt.Sprintf(format, args...))
}
