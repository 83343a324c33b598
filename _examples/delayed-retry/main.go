// Command delayed-retry retries failed messages with a growing delay and moves the ones that
// keep failing to a dead-letter topic, consumed by a second handler: what Watermill users
// otherwise build with the SQL Pub/Sub's delayed requeuer and a poison queue, here with the
// adapter alone.
//
// A Watermill router consumes the topic payment.capture through a redisdelay.Subscriber of the
// consumer group "payments". Its handler "capture-payment" asks a (simulated) payment gateway
// to capture each payment; the gateway times out a given number of times per payment, and on
// one payment every time. The handler has Watermill's middleware.DelayOnError{InitialInterval:
// 100ms, MaxInterval: 400ms, Multiplier: 2}: when the handler fails, the middleware sets the
// delay metadata on the message, the router nacks it, and the adapter makes it due again after
// that delay (100ms, then 200ms, then 400ms), storing the changed metadata so that the next
// failure doubles it. There is no requeuer: Nack is the retry.
//
// SubscriberConfig.MaxAttempts is 4: a message whose fourth delivery is nacked becomes a dead
// letter. The adapter moves it, with the metadata that says why (redisdelay.DeadLetterReasonMetadataKey
// "nacked", DeadLetterAttemptsMetadataKey, DeadLetterTopicMetadataKey, DeadLetterGroupMetadataKey), to the topic
// redisdelay.DefaultDeadLetterTopic("payment.capture", "payments"), that is
// "payment.capture.dead-letter.payments", where the second handler "report-dead-letters" (consumer
// group "payments-dead-letters") consumes it.
//
// The output is a timeline with one line per attempt (its number, how long after the previous
// failure it started, and the delay DelayOnError asked for) and per dead letter, and a summary:
// payments that succeeded (on the first attempt, or after retries), retries, retries that came
// before their delay (must be 0), and dead letters with their reason. The exit code is 0 when
// every payment ended as expected (each one that can succeed succeeded on the attempt expected,
// the always-failing one became a dead letter with reason "nacked" after 4 attempts and reached
// the second handler) and no retry came early; 1 otherwise. The run waits for these events and
// gives up after 10s.
//
// Run it from the repository root:
//
//	go run ./_examples/delayed-retry
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/delayed-retry -keep
//
// Without REDIS_ADDR (or REDIS_URL) the example starts an embedded miniredis. With it, it uses
// that server under the key prefix redisdelay-example-delayed-retry:, deleting what an earlier run
// left there, so runs must not overlap. It deletes its keys when it ends, unless run with
// -keep. It leaves one capture, pay-tomorrow, scheduled for the next day after the router
// stopped, and prints the redisdelay commands that show it (stats, list, show) either way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
)

const (
	topic           = "payment.capture"
	consumerGroup   = "payments"
	deadLetterGroup = "payments-dead-letters"
	// maxAttempts is the deliveries a payment gets before it becomes a dead letter.
	maxAttempts = 4
	// alwaysFails as a payment's failures means the gateway never accepts it.
	alwaysFails = -1
	// timeout bounds the whole run.
	timeout = 10 * time.Second
)

// retryDelay is the router middleware that sets the delay of the next attempt on a failure.
var retryDelay = middleware.DelayOnError{
	InitialInterval: 100 * time.Millisecond,
	MaxInterval:     400 * time.Millisecond,
	Multiplier:      2,
}

// payment is one message of the run and how the gateway treats it.
type payment struct {
	id string
	// failures is how many attempts the gateway fails before it accepts the payment, or
	// alwaysFails.
	failures int
}

var payments = []payment{
	{"pay-1", 0},
	{"pay-2", 1},
	{"pay-3", 2},
	{"pay-4", 1},
	{"pay-5", alwaysFails},
}

func main() {
	os.Exit(run())
}

// run is the whole example; it returns the exit code, so that deferred cleanups run first.
func run() int {
	keep := flag.Bool("keep", false, exampleredis.KeepUsage)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "delayed-retry: unexpected arguments %q\n", flag.Args())
		return 2
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()
	if err := runExample(ctx, *keep, newTimeline(os.Stdout)); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "FAIL:", line)
		}
		return 1
	}
	return 0
}

// runExample wires the publisher, the two subscribers and the router, publishes the payments,
// waits until each has ended, shuts everything down and prints the summary. It returns an error
// when the run failed, the summary's verdict included.
func runExample(ctx context.Context, keep bool, tl *timeline) (err error) {
	rd, err := exampleredis.Open(ctx, "delayed-retry", keep, tl.printf)
	if err != nil {
		return err
	}
	// Deletes the example's keys (unless -keep) and prints how to see its queues, last.
	defer func() { err = errors.Join(err, rd.Close(os.Stdout)) }()
	client := rd.Client

	prefix := rd.Prefix
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        client,
		KeyPrefix:     prefix,
		ConsumerGroup: consumerGroup,
		MaxAttempts:   maxAttempts,
		// NackBackoff applies to a Nack whose delay metadata the handler left unchanged.
		// DelayOnError changes it on every failure, except when it repeats MaxInterval within
		// one second (_watermill_delayed_until has whole seconds), which looks the same as no
		// change: this backoff makes that case wait MaxInterval too.
		NackBackoff: redisdelay.ConstantBackoff(retryDelay.MaxInterval),
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	deadLetterTopic := redisdelay.DefaultDeadLetterTopic(topic, consumerGroup)
	deadLetterSub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        client,
		KeyPrefix:     prefix,
		ConsumerGroup: deadLetterGroup,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer deadLetterSub.Close()

	// Register both groups before the first publish, so that each keeps every message from now
	// on.
	if err := errors.Join(sub.SubscribeInitialize(topic), deadLetterSub.SubscribeInitialize(deadLetterTopic)); err != nil {
		return err
	}

	ex := newExample(tl)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler("capture-payment", topic, sub, ex.capture).AddMiddleware(retryDelay.Middleware)
	router.AddConsumerHandler("report-dead-letters", deadLetterTopic, deadLetterSub, ex.reportDeadLetter)
	stopRouter, err := startRouter(router)
	if err != nil {
		return err
	}
	tl.printf("router running: %q consumes %q (MaxAttempts %d, DelayOnError %s/%s/x%g), %q consumes %q",
		"capture-payment", topic, maxAttempts, retryDelay.InitialInterval, retryDelay.MaxInterval, retryDelay.Multiplier,
		"report-dead-letters", deadLetterTopic)

	waitErr := ex.publishAndWait(ctx, pub)

	// With the router stopped, a capture due tomorrow stays scheduled, for -keep to show.
	leftover := message.NewMessage("pay-tomorrow", []byte("pay-tomorrow"))
	closeErr := errors.Join(stopRouter(), rd.LeaveScheduled(pub, topic, consumerGroup, "pay-tomorrow", leftover, 24*time.Hour),
		pub.Close(), sub.Close(), deadLetterSub.Close())
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("router, publisher and subscribers closed")
	}
	return errors.Join(waitErr, ex.summarize(os.Stdout), closeErr)
}

// startRouter runs router in the background and returns once it is running. The returned
// function closes the router and waits for Run to return.
func startRouter(router *message.Router) (func() error, error) {
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
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

// example is the payment service and its bookkeeping, safe for concurrent use.
type example struct {
	tl      *timeline
	allDone chan struct{} // closed once every payment has ended (succeeded or dead letter seen)

	mu          sync.Mutex
	expected    map[string]payment
	calls       map[string]int       // gateway calls per payment
	failedAt    map[string]time.Time // when each payment's last attempt failed
	succeededOn map[string]int       // the attempt each payment succeeded on
	retries     int
	early       []string
	deadLetters map[string]deadLetter
	ended       map[string]bool
}

// deadLetter is what the dead-letter handler saw of one payment.
type deadLetter struct {
	reason, attempts, fromTopic, fromGroup string
}

func newExample(tl *timeline) *example {
	e := &example{
		tl:          tl,
		allDone:     make(chan struct{}),
		expected:    map[string]payment{},
		calls:       map[string]int{},
		failedAt:    map[string]time.Time{},
		succeededOn: map[string]int{},
		deadLetters: map[string]deadLetter{},
		ended:       map[string]bool{},
	}
	for _, p := range payments {
		e.expected[p.id] = p
	}
	return e
}

// publishAndWait publishes one message per payment, due at once, then waits until every payment
// has ended, the timeout passed or ctx was cancelled (Ctrl-C).
func (e *example) publishAndWait(ctx context.Context, pub message.Publisher) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, p := range payments {
		if err := pub.Publish(topic, message.NewMessage(p.id, []byte(p.id))); err != nil {
			return fmt.Errorf("publish %s: %w", p.id, err)
		}
		e.tl.printf("published %s (%s)", p.id, describeGateway(p))
	}
	select {
	case <-e.allDone:
		e.tl.printf("all %d payments ended", len(payments))
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("gave up waiting for the payments after %s", timeout)
		}
		return errors.New("interrupted")
	}
}

func describeGateway(p payment) string {
	switch p.failures {
	case alwaysFails:
		return "the gateway always times out"
	case 0:
		return "the gateway accepts it at once"
	case 1:
		return "the gateway times out once, then accepts it"
	default:
		return fmt.Sprintf("the gateway times out %d times, then accepts it", p.failures)
	}
}

// capture is the handler of payment.capture. It returns an error when the gateway fails; the
// DelayOnError middleware then sets the delay of the next attempt, and the router nacks.
func (e *example) capture(msg *message.Message) error {
	started := time.Now()
	id := msg.UUID
	attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptMetadataKey))

	e.mu.Lock()
	defer e.mu.Unlock()
	p, known := e.expected[id]
	if !known {
		e.tl.printf("%s: not a payment of this run, acked", id)
		return nil
	}
	note := ""
	if attempt > 1 {
		// The delay metadata the message carries now is the one DelayOnError set when the
		// previous attempt failed, and the one the adapter waited for.
		asked, _ := time.ParseDuration(msg.Metadata.Get(delay.DelayedForKey))
		waited := started.Sub(e.failedAt[id])
		e.retries++
		if waited < asked {
			e.early = append(e.early, fmt.Sprintf("%s attempt %d after %s, before its delay %s", id, attempt, millis(waited), asked))
		}
		note = fmt.Sprintf(", %s after attempt %d failed (DelayOnError delay %s)", millis(waited), attempt-1, asked)
	}

	e.calls[id]++
	if p.failures == alwaysFails || e.calls[id] <= p.failures {
		e.failedAt[id] = time.Now()
		what := "Nack, retried after DelayOnError's delay"
		if attempt >= maxAttempts {
			what = fmt.Sprintf("Nack on the last of %d attempts: becomes a dead letter", maxAttempts)
		}
		e.tl.printf("%s attempt %d%s: gateway timeout -> %s", id, attempt, note, what)
		return fmt.Errorf("capture %s: gateway timeout", id)
	}
	e.succeededOn[id] = attempt
	e.tl.printf("%s attempt %d%s: captured -> Ack", id, attempt, note)
	e.endLocked(id)
	return nil
}

// reportDeadLetter is the handler of the dead-letter topic: it records why the payment was
// given up on.
func (e *example) reportDeadLetter(msg *message.Message) error {
	dl := deadLetter{
		reason:    msg.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey),
		attempts:  msg.Metadata.Get(redisdelay.DeadLetterAttemptsMetadataKey),
		fromTopic: msg.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey),
		fromGroup: msg.Metadata.Get(redisdelay.DeadLetterGroupMetadataKey),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tl.printf("dead letter %s: reason %q after %s attempts, from topic %q, group %q",
		msg.UUID, dl.reason, dl.attempts, dl.fromTopic, dl.fromGroup)
	e.deadLetters[msg.UUID] = dl
	e.endLocked(msg.UUID)
	return nil
}

func (e *example) endLocked(id string) {
	if e.ended[id] {
		return
	}
	e.ended[id] = true
	if len(e.ended) == len(payments) {
		close(e.allDone)
	}
}

// summarize prints the summary to w and returns an error when the run failed: a payment that
// did not end as expected, or a retry that came before its delay.
func (e *example) summarize(w io.Writer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	first, afterRetries := 0, 0
	for _, attempt := range e.succeededOn {
		if attempt == 1 {
			first++
		} else {
			afterRetries++
		}
	}
	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  payments                      %d\n", len(payments))
	fmt.Fprintf(w, "  succeeded                     %d (%d on the first attempt, %d after retries)\n", len(e.succeededOn), first, afterRetries)
	fmt.Fprintf(w, "  retries                       %d\n", e.retries)
	fmt.Fprintf(w, "  early retries                 %d\n", len(e.early))
	fmt.Fprintf(w, "  dead-lettered                 %d\n", len(e.deadLetters))
	for _, p := range payments {
		if dl, ok := e.deadLetters[p.id]; ok {
			fmt.Fprintf(w, "    %s: %s=%q, %s=%s\n", p.id, redisdelay.DeadLetterReasonMetadataKey, dl.reason, redisdelay.DeadLetterAttemptsMetadataKey, dl.attempts)
		}
	}

	var errs []error
	for _, p := range payments {
		attempt, succeeded := e.succeededOn[p.id]
		dl, dead := e.deadLetters[p.id]
		switch {
		case p.failures == alwaysFails && !dead:
			errs = append(errs, fmt.Errorf("%s: never reached the dead-letter topic", p.id))
		case p.failures == alwaysFails && (dl.reason != redisdelay.DeadLetterReasonNacked || dl.attempts != strconv.Itoa(maxAttempts)):
			errs = append(errs, fmt.Errorf("%s: dead letter with reason %q after %s attempts, want %q after %d", p.id, dl.reason, dl.attempts, redisdelay.DeadLetterReasonNacked, maxAttempts))
		case p.failures == alwaysFails:
		case dead:
			errs = append(errs, fmt.Errorf("%s: became a dead letter, want it to succeed on attempt %d", p.id, p.failures+1))
		case !succeeded:
			errs = append(errs, fmt.Errorf("%s: never succeeded", p.id))
		case attempt != p.failures+1:
			errs = append(errs, fmt.Errorf("%s: succeeded on attempt %d, want %d", p.id, attempt, p.failures+1))
		}
	}
	for _, early := range e.early {
		errs = append(errs, errors.New(early))
	}
	if len(errs) == 0 {
		fmt.Fprintln(w, "OK: every payment ended as expected, no retry before its delay")
	}
	return errors.Join(errs...)
}

// millis formats d in milliseconds with 0.1 ms precision.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
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
