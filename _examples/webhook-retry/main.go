// Command webhook-retry delivers webhooks to merchants' HTTP endpoints on a fixed retry
// schedule, gives up on the ones that keep failing (dead letters), and requeues those once the
// failing endpoint has recovered.
//
// A payment provider notifies merchants of payment events by POSTing them to each merchant's
// endpoint. Here the endpoints are one httptest.Server with a path per merchant, each failing
// (503) its first N calls: "acme" none, "globex" 1, "hooli" 3, and "initech" every call until
// the example declares it recovered. Each event is a message on the topic payment.notify; a
// consumer of the group "webhook-sender" POSTs it, then Acks it on a 2xx answer and Nacks it
// otherwise.
//
// The retry schedule is a redisdelay.ScheduleBackoff with the shape of
// redisdelay.NotifyRetrySchedule, the schedule payment providers use (15s, 15s, 30s, 3min, ...,
// then give up): its first four delays divided by 300, so 50ms, 50ms, 100ms and 600ms, so that
// the example runs in about a second. It is SubscriberConfig.NackBackoff, and
// SubscriberConfig.MaxAttempts is schedule.MaxAttempts(), the first delivery plus one retry per
// delay (5), as NotifyRetrySchedule.MaxAttempts() is for the real schedule. An event whose
// fifth delivery is nacked becomes a dead letter: it waits on the dead-letter topic
// redisdelay.DefaultDeadLetterTopic("payment.notify", "webhook-sender"), which nobody consumes.
//
// Once both of initech's events are dead letters (the example waits for
// redisdelay.Inspector.Stats to count them), it lists them with Inspector.List(StateDeadLettered),
// declares initech's endpoint recovered, and moves them back to the group with
// redisdelay.NewInspector(...).Requeue(ctx, "payment.notify", "webhook-sender"): they are due at
// once, start again at attempt 1, and are delivered.
//
// The output is a timeline (one line per call of an endpoint, with the attempt and how long after
// the previous failure it came) and a summary: events delivered on the first try, after retries,
// dead-lettered, requeued and delivered, and retries that came before their scheduled delay
// (must be 0). The exit code is 0 when every event ended as its endpoint's behaviour says (on
// the first try, on the attempt after its endpoint's failures, or dead-lettered with reason
// "nacked" after 5 attempts, then requeued and delivered) and no retry came early; 1 otherwise.
// The run waits for these events and gives up after 10s.
//
// Run it from the repository root:
//
//	go run ./_examples/webhook-retry
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/webhook-retry -keep
//
// Without REDIS_ADDR (or REDIS_URL) the example starts an embedded miniredis. With it, it uses
// that server under the key prefix redisdelay-example-webhook-retry:, deleting what an earlier run
// left there, so runs must not overlap. It deletes its keys when it ends, unless run with
// -keep. It leaves one event, evt-tomorrow, scheduled for the next day after the consumer
// stopped, and prints the redisdelay commands that show it (stats, list, show) either way.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
)

const (
	topic         = "payment.notify"
	consumerGroup = "webhook-sender"
	// scheduleScale divides NotifyRetrySchedule's delays, so that the example runs in a second.
	scheduleScale = 300
	// untilRecovered as an endpoint's failures means it fails every call until recover.
	untilRecovered = math.MaxInt
	// timeout bounds the whole run.
	timeout = 10 * time.Second
	// pollInterval is how often the example asks the Inspector while it waits for dead letters.
	pollInterval = 20 * time.Millisecond
)

// schedule is the retry schedule: NotifyRetrySchedule's first four delays (15s, 15s, 30s, 3min)
// divided by scheduleScale.
var schedule = scaled(redisdelay.NotifyRetrySchedule[:4], scheduleScale)

// merchantFailures is how many calls each merchant's endpoint fails before it answers 2xx.
var merchantFailures = map[string]int{
	"acme":    0,
	"globex":  1,
	"hooli":   3,
	"initech": untilRecovered,
}

// event is a webhook: the message payload, POSTed to the merchant's endpoint.
type event struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Merchant string `json:"merchant"`
}

var events = []event{
	{"evt-1", "payment.succeeded", "acme"},
	{"evt-2", "payment.succeeded", "globex"},
	{"evt-3", "payment.refunded", "hooli"},
	{"evt-4", "payment.succeeded", "initech"},
	{"evt-5", "payment.failed", "acme"},
	{"evt-6", "payment.refunded", "initech"},
}

func scaled(s redisdelay.ScheduleBackoff, by int) redisdelay.ScheduleBackoff {
	out := make(redisdelay.ScheduleBackoff, len(s))
	for i, d := range s {
		out[i] = d / time.Duration(by)
	}
	return out
}

func main() {
	os.Exit(run())
}

// run is the whole example; it returns the exit code, so that deferred cleanups run first.
func run() int {
	keep := flag.Bool("keep", false, exampleredis.KeepUsage)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "webhook-retry: unexpected arguments %q\n", flag.Args())
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

// runExample starts the endpoints, the publisher and the consumer, publishes the events, waits
// for the dead letters, requeues them, waits until every event was delivered, shuts everything
// down and prints the summary. It returns an error when the run failed, the summary's verdict
// included.
func runExample(ctx context.Context, keep bool, tl *timeline) (err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rd, err := exampleredis.Open(ctx, "webhook-retry", keep, tl.printf)
	if err != nil {
		return err
	}
	// Deletes the example's keys (unless -keep) and prints how to see its queues, last.
	defer func() { err = errors.Join(err, rd.Close(os.Stdout)) }()
	client := rd.Client

	endpoints := newEndpoints()
	server := httptest.NewServer(endpoints)
	defer server.Close()
	tl.printf("merchant endpoints at %s/hooks/{merchant}", server.URL)

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
		NackBackoff:   schedule,
		MaxAttempts:   schedule.MaxAttempts(),
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	// The Inspector must use the publisher's key prefix. It holds no resources.
	inspector, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix}, watermill.NopLogger{})
	if err != nil {
		return err
	}

	ex := newExample(tl, server.URL, endpoints)
	// The consumer runs until Close; the run's timeout ends the waits below instead.
	msgs, err := sub.Subscribe(context.WithoutCancel(ctx), topic)
	if err != nil {
		return err
	}
	var consumer sync.WaitGroup
	consumer.Add(1)
	go func() {
		defer consumer.Done()
		for msg := range msgs {
			ex.send(msg)
		}
	}()
	tl.printf("consumer group %q sends webhooks; retry schedule %s (NotifyRetrySchedule[:4] / %d), MaxAttempts %d",
		consumerGroup, describeSchedule(schedule), scheduleScale, schedule.MaxAttempts())

	waitErr := ex.deliverAll(ctx, pub, inspector)

	// With the consumer stopped, an event due tomorrow stays scheduled, for -keep to show.
	closeErr := sub.Close()
	consumer.Wait()
	leftover, err := json.Marshal(event{"evt-tomorrow", "payment.succeeded", "acme"})
	if err != nil {
		return err
	}
	closeErr = errors.Join(closeErr, rd.LeaveScheduled(pub, topic, consumerGroup, "evt-tomorrow", message.NewMessage("evt-tomorrow", leftover), 24*time.Hour), pub.Close())
	consumer.Wait()
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("publisher and subscriber closed")
	}
	return errors.Join(waitErr, ex.summarize(os.Stdout), closeErr)
}

func describeSchedule(s redisdelay.ScheduleBackoff) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ", ")
}

// endpoints are the merchants' webhook endpoints, at /hooks/{merchant}. Each fails its first
// merchantFailures calls with 503, and answers 204 after; recover makes every endpoint succeed.
type endpoints struct {
	mu        sync.Mutex
	calls     map[string]int
	recovered bool
}

func newEndpoints() *endpoints {
	return &endpoints{calls: map[string]int{}}
}

func (e *endpoints) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	merchant, ok := strings.CutPrefix(r.URL.Path, "/hooks/")
	failures, known := merchantFailures[merchant]
	if !ok || !known || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	e.mu.Lock()
	e.calls[merchant]++
	fail := !e.recovered && e.calls[merchant] <= failures
	e.mu.Unlock()
	if fail {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *endpoints) recover() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recovered = true
}

func (e *endpoints) totalCalls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls {
		n += c
	}
	return n
}

// outcome is how an event was delivered.
type outcome int

const (
	pending outcome = iota
	firstTry
	afterRetries
	afterRequeue
)

// example is the webhook sender and its bookkeeping, safe for concurrent use.
type example struct {
	tl        *timeline
	baseURL   string
	endpoints *endpoints
	http      *http.Client

	// settled is closed once every event was delivered or nacked on its last attempt; all
	// once every event was delivered.
	settled, all chan struct{}

	mu          sync.Mutex
	outcomes    map[string]outcome
	attempts    map[string]int       // the attempt each event was delivered on
	failedAt    map[string]time.Time // when each event's last attempt failed
	lastFailed  map[string]bool      // events nacked on their last attempt
	deadLetters map[string]string    // dead letters as listed: reason and attempts
	requeued    int64
	early       []string
}

func newExample(tl *timeline, baseURL string, ep *endpoints) *example {
	return &example{
		tl:          tl,
		baseURL:     baseURL,
		endpoints:   ep,
		http:        &http.Client{Timeout: 2 * time.Second},
		settled:     make(chan struct{}),
		all:         make(chan struct{}),
		outcomes:    map[string]outcome{},
		attempts:    map[string]int{},
		failedAt:    map[string]time.Time{},
		lastFailed:  map[string]bool{},
		deadLetters: map[string]string{},
	}
}

// deliverAll publishes the events, waits for the dead letters, requeues them after the endpoint
// recovered, and waits until every event was delivered or ctx ended.
func (e *example) deliverAll(ctx context.Context, pub message.Publisher, in *redisdelay.Inspector) error {
	for _, evt := range events {
		payload, err := json.Marshal(evt)
		if err != nil {
			return err
		}
		if err := pub.Publish(topic, message.NewMessage(evt.ID, payload)); err != nil {
			return fmt.Errorf("publish %s: %w", evt.ID, err)
		}
	}
	e.tl.printf("published %d events", len(events))

	if err := waitClosed(ctx, e.settled, "every event delivered or nacked on its last attempt"); err != nil {
		return err
	}
	// The move to the dead-letter topic happens as the last Nack is processed; wait until the
	// Inspector counts every dead letter expected.
	want := e.expectedDeadLetters()
	var stats redisdelay.GroupStats
	err := poll(ctx, func() (bool, error) {
		all, err := in.Stats(ctx, topic)
		if err != nil || len(all) != 1 {
			return false, err
		}
		stats = all[0]
		return stats.DeadLetters == int64(want), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d dead letters: %w", want, err)
	}
	e.tl.printf("stats of %q: scheduled %d, due %d, in flight %d, dead letters %d",
		consumerGroup, stats.Scheduled, stats.Due, stats.InFlight, stats.DeadLetters)

	page, err := in.List(ctx, topic, consumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
	if err != nil {
		return err
	}
	e.mu.Lock()
	for _, m := range page.Messages {
		e.deadLetters[m.UUID] = fmt.Sprintf("reason %q after %s attempts", m.Metadata[redisdelay.DeadLetterReasonMetadataKey], m.Metadata[redisdelay.DeadLetterAttemptsMetadataKey])
		e.tl.printf("dead letter %s: %s", m.UUID, e.deadLetters[m.UUID])
	}
	e.mu.Unlock()

	e.endpoints.recover()
	e.tl.printf("initech's endpoint recovered")
	n, err := in.Requeue(ctx, topic, consumerGroup)
	if err != nil {
		return fmt.Errorf("requeue the dead letters: %w", err)
	}
	e.mu.Lock()
	e.requeued = n
	e.mu.Unlock()
	e.tl.printf("requeued %d dead letters to group %q", n, consumerGroup)

	if err := waitClosed(ctx, e.all, "every event delivered"); err != nil {
		return err
	}
	e.tl.printf("all %d events delivered", len(events))
	return nil
}

// waitClosed waits until ch is closed or ctx ends; what names what it waits for.
func waitClosed(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("gave up waiting for %s after %s", what, timeout)
		}
		return errors.New("interrupted")
	}
}

// poll calls cond every pollInterval until it reports true or an error, or ctx ends.
func poll(ctx context.Context, cond func() (bool, error)) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if ok, err := cond(); ok || err != nil {
			return err
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (e *example) expectedDeadLetters() int {
	n := 0
	for _, evt := range events {
		if merchantFailures[evt.Merchant] >= schedule.MaxAttempts() {
			n++
		}
	}
	return n
}

// send POSTs one webhook to its merchant's endpoint, and Acks the message on a 2xx answer or
// Nacks it otherwise, so that it comes back after the schedule's next delay.
func (e *example) send(msg *message.Message) {
	started := time.Now()
	attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptMetadataKey))
	requeued := msg.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey) != ""
	var evt event
	if err := json.Unmarshal(msg.Payload, &evt); err != nil {
		// Retrying cannot repair a payload, so the message is acked and reported instead.
		e.tl.printf("dropping %s: bad payload: %v", msg.UUID, err)
		msg.Ack()
		return
	}

	note := ""
	e.mu.Lock()
	if attempt > 1 {
		// The schedule's delay after attempt-1 failed attempts.
		wantWait := schedule.NackDelay(attempt - 1)
		waited := started.Sub(e.failedAt[evt.ID])
		if waited < wantWait {
			e.early = append(e.early, fmt.Sprintf("%s attempt %d came %s after the failure, before its delay %s", evt.ID, attempt, millis(waited), wantWait))
		}
		note = fmt.Sprintf(", %s after attempt %d failed (schedule: %s)", millis(waited), attempt-1, wantWait)
	}
	if requeued {
		note += ", requeued dead letter"
	}
	e.mu.Unlock()

	status, err := e.post(msg.Context(), evt, msg.Payload)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.failedAt[evt.ID] = time.Now()
		what := "Nack"
		if attempt >= schedule.MaxAttempts() {
			what = fmt.Sprintf("Nack on the last of %d attempts: becomes a dead letter", schedule.MaxAttempts())
			e.lastFailed[evt.ID] = true
		}
		e.tl.printf("%s -> %s attempt %d%s: %v -> %s", evt.ID, evt.Merchant, attempt, note, err, what)
		msg.Nack()
		e.checkSettledLocked()
		return
	}
	e.tl.printf("%s -> %s attempt %d%s: %d -> Ack", evt.ID, evt.Merchant, attempt, note, status)
	msg.Ack()
	if e.outcomes[evt.ID] == pending {
		e.attempts[evt.ID] = attempt
		switch {
		case requeued:
			e.outcomes[evt.ID] = afterRequeue
		case attempt == 1:
			e.outcomes[evt.ID] = firstTry
		default:
			e.outcomes[evt.ID] = afterRetries
		}
	}
	e.checkSettledLocked()
}

// post sends the webhook and returns the answer's status, or an error for anything but 2xx.
func (e *example) post(ctx context.Context, evt event, payload []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.baseURL+"/hooks/"+evt.Merchant, bytes.NewReader(payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// checkSettledLocked closes settled once every event was delivered or nacked on its last
// attempt, and all once every event was delivered.
func (e *example) checkSettledLocked() {
	delivered, settled := 0, 0
	for _, evt := range events {
		switch {
		case e.outcomes[evt.ID] != pending:
			delivered++
			settled++
		case e.lastFailed[evt.ID]:
			settled++
		}
	}
	if settled == len(events) && !isClosed(e.settled) {
		close(e.settled)
	}
	if delivered == len(events) && !isClosed(e.all) {
		close(e.all)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// expectedOutcome is how an event should be delivered, given its endpoint, and on which
// attempt.
func expectedOutcome(evt event) (outcome, int) {
	failures := merchantFailures[evt.Merchant]
	switch {
	case failures == 0:
		return firstTry, 1
	case failures < schedule.MaxAttempts():
		return afterRetries, failures + 1
	default:
		return afterRequeue, 1
	}
}

// summarize prints the summary to w and returns an error when the run failed: an event not
// delivered as expected, a wrong dead letter or requeue, or a retry before its delay.
func (e *example) summarize(w io.Writer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	count := func(o outcome) (n int, ids []string) {
		for _, evt := range events {
			if e.outcomes[evt.ID] == o {
				n++
				ids = append(ids, fmt.Sprintf("%s on attempt %d", evt.ID, e.attempts[evt.ID]))
			}
		}
		return n, ids
	}
	first, _ := count(firstTry)
	retried, retriedIDs := count(afterRetries)
	requeuedDelivered, _ := count(afterRequeue)
	deadIDs := slices.Sorted(maps.Keys(e.deadLetters))
	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  events                        %d\n", len(events))
	fmt.Fprintf(w, "  delivered on the first try    %d\n", first)
	fmt.Fprintf(w, "  delivered after retries       %d (%s)\n", retried, strings.Join(retriedIDs, ", "))
	fmt.Fprintf(w, "  dead-lettered                 %d (%s)\n", len(e.deadLetters), strings.Join(deadIDs, ", "))
	fmt.Fprintf(w, "  requeued and delivered        %d/%d\n", requeuedDelivered, e.requeued)
	fmt.Fprintf(w, "  early retries                 %d\n", len(e.early))
	fmt.Fprintf(w, "  endpoint calls                %d\n", e.endpoints.totalCalls())

	var errs []error
	wantDead := fmt.Sprintf("reason %q after %d attempts", redisdelay.DeadLetterReasonNacked, schedule.MaxAttempts())
	for _, evt := range events {
		want, wantAttempt := expectedOutcome(evt)
		got, attempt := e.outcomes[evt.ID], e.attempts[evt.ID]
		dl, dead := e.deadLetters[evt.ID]
		switch {
		case got == pending:
			errs = append(errs, fmt.Errorf("%s: never delivered", evt.ID))
		case got != want || attempt != wantAttempt:
			errs = append(errs, fmt.Errorf("%s: delivered on attempt %d (requeued: %t), want attempt %d (requeued: %t)", evt.ID, attempt, got == afterRequeue, wantAttempt, want == afterRequeue))
		case want == afterRequeue && dl != wantDead:
			errs = append(errs, fmt.Errorf("%s: dead letter %q, want %s", evt.ID, dl, wantDead))
		case want != afterRequeue && dead:
			errs = append(errs, fmt.Errorf("%s: became a dead letter, want none", evt.ID))
		}
	}
	if want := e.expectedDeadLetters(); e.requeued != int64(want) {
		errs = append(errs, fmt.Errorf("requeued %d dead letters, want %d", e.requeued, want))
	}
	for _, early := range e.early {
		errs = append(errs, errors.New(early))
	}
	if len(errs) == 0 {
		fmt.Fprintln(w, "OK: every event delivered as its endpoint allowed, dead letters requeued and delivered, no retry before its delay")
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

func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%-8s %s\n", fmt.Sprintf("+%.3fs", time.Since(t.start).Seconds()), fmt.Sprintf(format, args...))
}
