// Command order-timeout shows the core use case of a delay queue: cancel an order that is
// still unpaid some time after it was placed.
//
// For every order it places, the example schedules a payment check on the topic
// order.payment-check through a redisdelay.Publisher, delayed by setting
// delay.WithContext(ctx, delay.For(d)) on the message context. A Watermill router consumes the
// topic through a redisdelay.Subscriber of the consumer group "order-service". When a check
// comes due, its handler cancels the order unless it was paid meanwhile; every third order is
// paid halfway through its delay, so both outcomes show up.
//
// The output is a timeline, one line per event with the time since the start, followed by a
// summary: how many checks were delivered, how many started before their due time (a delay
// queue must never do that) and how late they started (p50, p99, max). The exit code is 0 when
// every check was delivered and none early, 1 otherwise.
//
// Run it from the repository root:
//
//	go run ./_examples/order-timeout
//	go run ./_examples/order-timeout -orders 50 -delay 1s -spread 1s
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/order-timeout
//
// Flags:
//
//	-orders N   number of orders to place (default 20)
//	-delay D    how long an order may stay unpaid, a Go duration (default 2s)
//	-spread D   the placements are spread evenly over this time, a Go duration (default 2s)
//
// Without REDIS_ADDR the example starts an embedded miniredis. With REDIS_ADDR it uses that
// server, under a key prefix unique to the run so that runs never mix; it deletes nothing
// there, and each run leaves the two small bookkeeping keys of its topic (the ID counter and
// the set of consumer groups) under its prefix.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
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
	// slack is how long, beyond the last due time, the example waits for the checks.
	slack = 10 * time.Second
)

// options are the command-line flags.
type options struct {
	orders int
	delay  time.Duration
	spread time.Duration
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

// runExample connects to Redis, wires the publisher, subscriber and router, places the orders,
// waits for their checks, shuts everything down and prints the summary. It returns an error
// when the run failed, the summary's verdict included.
func runExample(ctx context.Context, opts options, tl *timeline) error {
	client, closeRedis, err := openRedis(ctx, tl)
	if err != nil {
		return err
	}
	defer closeRedis()

	// A prefix of its own keeps this run's keys apart from other runs on a shared Redis.
	prefix := "example:" + uuid.NewString() + ":"
	tl.printf("key prefix %s", prefix)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        client,
		KeyPrefix:     prefix,
		ConsumerGroup: consumerGroup,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()

	// Register the group before the first publish: a message published to a topic on which no
	// group is registered yet is kept for the default group, which nobody here consumes.
	if err := sub.SubscribeInitialize(topic); err != nil {
		return err
	}

	ex := newExample(opts, tl, pub)
	stopRouter, err := startRouter(ctx, sub, ex.handlePaymentCheck)
	if err != nil {
		return err
	}
	tl.printf("router running: group %q consumes %q", consumerGroup, topic)

	waitErr := ex.placeAndWait(ctx)

	// The router closes the subscriber as well; Close is idempotent, so closing it here too is
	// harmless and makes the shutdown explicit.
	closeErr := errors.Join(stopRouter(), pub.Close(), sub.Close())
	ex.payments.Wait()
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("router, publisher and subscriber closed")
	}
	return errors.Join(waitErr, ex.stats.summarize(os.Stdout), closeErr)
}

// openRedis connects to REDIS_ADDR when it is set, or starts an embedded miniredis, and returns
// the client and a function that closes what was opened.
func openRedis(ctx context.Context, tl *timeline) (*redis.Client, func(), error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		client := redis.NewClient(&redis.Options{Addr: addr})
		if err := client.Ping(ctx).Err(); err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("redis at %s (REDIS_ADDR): %w", addr, err)
		}
		tl.printf("using Redis at %s (REDIS_ADDR)", addr)
		return client, func() { client.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, nil, fmt.Errorf("start miniredis: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	tl.printf("using embedded miniredis at %s (set REDIS_ADDR to use a real Redis)", mr.Addr())
	return client, func() { client.Close(); mr.Close() }, nil
}

// startRouter runs a router with one handler for the payment checks and returns once it is
// running. The returned function closes the router and waits for Run to return.
func startRouter(ctx context.Context, sub message.Subscriber, handle message.NoPublishHandlerFunc) (func() error, error) {
	// The router's info logs would drown the timeline; the example prints its own lines.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddConsumerHandler("cancel-unpaid-orders", topic, sub, handle)

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

// example is the order service: it places orders, takes payments and handles payment checks.
type example struct {
	opts     options
	tl       *timeline
	pub      message.Publisher
	orders   *orderBook
	stats    *checkStats
	payments sync.WaitGroup // the goroutines that pay orders
}

func newExample(opts options, tl *timeline, pub message.Publisher) *example {
	return &example{
		opts:   opts,
		tl:     tl,
		pub:    pub,
		orders: newOrderBook(),
		stats:  newCheckStats(opts.orders),
	}
}

// placeAndWait places the orders, then waits until every check was handled, the deadline
// passed or ctx was cancelled (Ctrl-C).
func (e *example) placeAndWait(ctx context.Context) error {
	deadline := time.Now().Add(e.opts.spread + e.opts.delay + slack)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel() // also stops payments still waiting when the run ends early

	if err := e.placeOrders(ctx); err != nil {
		return err
	}
	select {
	case <-e.stats.allHandled:
		e.tl.printf("all %d payment checks handled", e.opts.orders)
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("gave up waiting for the payment checks after %s", e.opts.spread+e.opts.delay+slack)
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
		id := strconv.Itoa(i)
		if err := e.placeOrder(ctx, id); err != nil {
			return err
		}
		if i%payEvery == 0 {
			e.payLater(ctx, id, e.opts.delay/2)
		}
	}
	return nil
}

// placeOrder records a new order and schedules its payment check e.opts.delay from now.
func (e *example) placeOrder(ctx context.Context, id string) error {
	placedAt := time.Now()
	e.orders.place(id)
	payload, err := json.Marshal(paymentCheck{OrderID: id, PlacedAt: placedAt})
	if err != nil {
		return err
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	// Taken before delay.For and before Publish reads the Redis clock, so the queue's own due
	// time is never earlier than this one: a check that starts before it was delivered early.
	due := time.Now().Add(e.opts.delay)
	msg.Metadata.Set(dueMetadataKey, strconv.FormatInt(due.UnixMicro(), 10))
	msg.SetContext(delay.WithContext(ctx, delay.For(e.opts.delay)))
	if err := e.pub.Publish(topic, msg); err != nil {
		return fmt.Errorf("schedule the payment check of order %s: %w", id, err)
	}
	e.tl.printf("order %s placed, payment check due at %s", id, e.tl.offset(due))
	return nil
}

// payLater pays order id after wait, in the background, unless ctx ends first.
func (e *example) payLater(ctx context.Context, id string, wait time.Duration) {
	e.payments.Go(func() {
		if sleepUntil(ctx, time.Now().Add(wait)) != nil {
			return
		}
		if e.orders.pay(id) {
			e.tl.printf("order %s paid", id)
		} else {
			e.tl.printf("order %s payment refused: already cancelled", id)
		}
	})
}

// handlePaymentCheck is the router handler: it cancels the order unless it was paid. Returning
// nil acks the message; an error would nack it, and the queue would deliver it again later.
func (e *example) handlePaymentCheck(msg *message.Message) error {
	started := time.Now()
	var check paymentCheck
	if err := json.Unmarshal(msg.Payload, &check); err != nil {
		// Retrying cannot repair a payload, so the message is acked and reported instead.
		e.tl.printf("dropping payment check %s: bad payload: %v", msg.UUID, err)
		return nil
	}
	dueUs, err := strconv.ParseInt(msg.Metadata.Get(dueMetadataKey), 10, 64)
	if err != nil {
		e.tl.printf("dropping payment check of order %s: bad %s: %v", check.OrderID, dueMetadataKey, err)
		return nil
	}
	late := started.Sub(time.UnixMicro(dueUs))

	outcome := "paid, nothing to do"
	if e.orders.cancelIfUnpaid(check.OrderID) {
		outcome = "unpaid -> cancelled"
	}
	note := describeLateness(late)
	if attempt := msg.Metadata.Get(redisdelay.AttemptMetadataKey); attempt != "1" {
		// Delivery is at least once: a check can come again after a crash or an expired lease.
		note += ", attempt " + attempt
	}
	e.stats.record(check.OrderID, late)
	e.tl.printf("order %s check: %s (%s)", check.OrderID, outcome, note)
	return nil
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
	awaitingPayment orderStatus = iota
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

// pay marks the order paid and reports whether it was still awaiting payment.
func (b *orderBook) pay(id string) bool {
	return b.transition(id, paid)
}

// cancelIfUnpaid cancels the order and reports whether it was still awaiting payment.
func (b *orderBook) cancelIfUnpaid(id string) bool {
	return b.transition(id, cancelled)
}

func (b *orderBook) transition(id string, to orderStatus) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.status[id]; !ok || s != awaitingPayment {
		return false
	}
	b.status[id] = to
	return true
}

// checkStats collects what the summary reports, safe for concurrent use.
type checkStats struct {
	want       int
	allHandled chan struct{} // closed once every order's check was handled

	mu         sync.Mutex
	handled    map[string]bool
	lateness   []time.Duration // of each order's first delivery
	early      int             // deliveries that started before their due time
	duplicates int             // deliveries of a check already handled
}

func newCheckStats(want int) *checkStats {
	return &checkStats{want: want, allHandled: make(chan struct{}), handled: map[string]bool{}}
}

func (s *checkStats) record(orderID string, late time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if late < 0 {
		s.early++
	}
	if s.handled[orderID] {
		s.duplicates++
		return
	}
	s.handled[orderID] = true
	s.lateness = append(s.lateness, late)
	if len(s.handled) == s.want {
		close(s.allHandled)
	}
}

// summarize prints the summary to w and returns an error when the run failed: a check was not
// delivered or one was delivered early.
func (s *checkStats) summarize(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sorted := slices.Sorted(slices.Values(s.lateness))
	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  delivered      %d/%d\n", len(s.handled), s.want)
	fmt.Fprintf(w, "  early          %d\n", s.early)
	fmt.Fprintf(w, "  duplicates     %d\n", s.duplicates)
	fmt.Fprintf(w, "  lateness p50   %s\n", millis(percentile(sorted, 50)))
	fmt.Fprintf(w, "  lateness p99   %s\n", millis(percentile(sorted, 99)))
	fmt.Fprintf(w, "  lateness max   %s\n", millis(percentile(sorted, 100)))

	var errs []error
	if missing := s.want - len(s.handled); missing > 0 {
		errs = append(errs, fmt.Errorf("%d of %d payment checks were never delivered", missing, s.want))
	}
	if s.early > 0 {
		errs = append(errs, fmt.Errorf("%d payment checks started before they were due", s.early))
	}
	if len(errs) == 0 {
		fmt.Fprintf(w, "OK: all %d payment checks delivered, none early\n", s.want)
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
