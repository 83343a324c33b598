// Command cqrs-delayed-command sends delayed commands through Watermill's CQRS component on
// the redisdelay adapter: a command handler runs when its command is due, never before, and
// publishes an event that an event handler records.
//
// The command bus (cqrs.NewCommandBusWithConfig) and the event bus (cqrs.NewEventBusWithConfig)
// publish through one redisdelay.Publisher, with cqrs.JSONMarshaler. The command processor
// (cqrs.NewCommandProcessorWithConfig) and the event processor
// (cqrs.NewEventProcessorWithConfig) add their handlers to one Watermill router; their
// SubscriberConstructor returns a redisdelay.Subscriber whose consumer group is the handler's
// name, so every handler gets every message of its topic (fan-out between groups).
//
// Each ConfirmReceipt{OrderID} command is sent with
//
//	commandBus.Send(delay.WithContext(ctx, delay.For(1500*time.Millisecond)), cmd)
//
// The Publisher reads the delay from the message context itself: no delay.NewPublisher wrapper
// is needed. When the command is due, the handler "confirm-receipt" runs and publishes a
// ReceiptConfirmed event on the event bus; the event handler "record-confirmation" records it.
//
// The first command is sent before the router starts. Its consumer group must exist by then:
// a message is kept for the groups registered on its topic when it is published. The
// SubscriberConstructor therefore registers the handler's group on its topic with
// SubscribeInitialize as soon as the processor creates the subscriber, which happens when the
// handler is added, before anything is sent. (Without that, a message published to a topic on
// which no group is registered at all waits, parked, for the first group that registers; but
// only that first group gets it, so registering explicitly is the robust way.)
//
// The output is a timeline, one line per event with the time since the start, and a summary:
// commands sent, commands delivered (each at least its delay after it was sent), deliveries
// that started early (must be 0), duplicates, lateness, and events received. The exit code is
// 0 when every command was delivered, none early, and every command's event was received; 1
// otherwise. The run waits for these events and gives up 10s after the last command was due.
//
// Run it from the repository root:
//
//	go run ./_examples/cqrs-delayed-command
//	go run ./_examples/cqrs-delayed-command -commands 10 -delay 3s
//	REDIS_ADDR=127.0.0.1:6379 go run ./_examples/cqrs-delayed-command -keep
//
// Flags:
//
//	-commands N  number of ConfirmReceipt commands to send, the first before the router
//	             starts (default 4)
//	-delay D     the delay of each command, a Go duration (default 1.5s)
//	-keep        keep the example's keys in Redis when it ends
//
// Without REDIS_ADDR (or REDIS_URL) the example starts an embedded miniredis. With it, it uses
// that server under the key prefix redisdelay-example-cqrs-delayed-command:, deleting what an earlier run
// left there, so runs must not overlap. It deletes its keys when it ends, unless run with
// -keep. It leaves one ConfirmReceipt command (key order-tomorrow) scheduled for the next day
// after the router stopped, and prints the redisdelay commands that show it (stats, list,
// show) either way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
)

const (
	// commandHandlerName is the command handler's name, and so its consumer group.
	commandHandlerName = "confirm-receipt"
	// eventHandlerName is the event handler's name, and so its consumer group.
	eventHandlerName = "record-confirmation"
	// routerStartsAfter is how long after the first command the router starts, so that the
	// first command is stored while nothing consumes its topic.
	routerStartsAfter = 500 * time.Millisecond
	// sendSpacing separates the commands sent once the router runs.
	sendSpacing = 250 * time.Millisecond
	// slack is how long, beyond the last command's due time, the example waits.
	slack = 10 * time.Second
)

// ConfirmReceipt asks to confirm that the customer received order OrderID. It is sent delayed:
// the customer has some time to complain before the receipt is confirmed.
type ConfirmReceipt struct {
	OrderID string `json:"order_id"`
}

// ReceiptConfirmed is the event published when a receipt was confirmed.
type ReceiptConfirmed struct {
	OrderID     string    `json:"order_id"`
	ConfirmedAt time.Time `json:"confirmed_at"`
}

// marshaler names commands and events by their struct name ("ConfirmReceipt"), which the
// topic names are built from.
var marshaler = cqrs.JSONMarshaler{GenerateName: cqrs.StructName}

// commandTopic and eventTopic name the topic of a command or an event.
func commandTopic(commandName string) string { return "commands." + commandName }
func eventTopic(eventName string) string     { return "events." + eventName }

// options are the command-line flags.
type options struct {
	commands int
	delay    time.Duration
	keep     bool
}

func main() {
	os.Exit(run())
}

// run is the whole example; it returns the exit code, so that deferred cleanups run first.
func run() int {
	opts, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cqrs-delayed-command:", err)
		return 2
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()

	if err := runExample(ctx, opts, newTimeline(os.Stdout)); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "FAIL:", line)
		}
		return 1
	}
	return 0
}

func parseFlags() (options, error) {
	var o options
	flag.IntVar(&o.commands, "commands", 4, "number of ConfirmReceipt commands to send, the first before the router starts")
	flag.DurationVar(&o.delay, "delay", 1500*time.Millisecond, "the delay of each command")
	flag.BoolVar(&o.keep, "keep", false, exampleredis.KeepUsage)
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", flag.Args())
	case o.commands < 1:
		return o, fmt.Errorf("-commands is %d, want at least 1", o.commands)
	case o.delay < 0:
		return o, fmt.Errorf("-delay is %s, want >= 0", o.delay)
	}
	return o, nil
}

// runExample wires the buses, processors and router, sends the commands, waits for their
// events, shuts everything down and prints the summary. It returns an error when the run
// failed, the summary's verdict included.
func runExample(ctx context.Context, opts options, tl *timeline) (err error) {
	rd, err := exampleredis.Open(ctx, "cqrs-delayed-command", opts.keep, tl.printf)
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

	ex := &example{opts: opts, tl: tl, client: client, prefix: prefix, stats: newCommandStats(opts.commands)}
	router, err := ex.wire(pub)
	if err != nil {
		return err
	}

	waitErr := ex.sendAndWait(ctx, router)

	// The router closes the subscribers the processors created.
	// With the router stopped, a command due tomorrow stays scheduled, for -keep to show.
	cmd := ConfirmReceipt{OrderID: "order-tomorrow"}
	leftover, err := marshaler.Marshal(cmd)
	if err != nil {
		return err
	}
	closeErr := errors.Join(ex.stopRouter(),
		rd.LeaveScheduled(pub, commandTopic(marshaler.Name(cmd)), commandHandlerName, cmd.OrderID, leftover, 24*time.Hour), pub.Close())
	if closeErr != nil {
		tl.printf("shutdown: %v", closeErr)
	} else {
		tl.printf("router, publisher and subscribers closed")
	}
	return errors.Join(waitErr, ex.stats.summarize(os.Stdout), closeErr)
}

// example is the order service: it sends ConfirmReceipt commands, confirms receipts and
// records the confirmations.
type example struct {
	opts     options
	tl       *timeline
	client   redis.UniversalClient
	prefix   string
	stats    *commandStats
	eventBus *cqrs.EventBus
	cmdBus   *cqrs.CommandBus

	routerDone chan error // Run's result, once the router was started
	router     *message.Router
}

// wire builds the command and event buses on pub, and the processors with their handlers on a
// new router, which it returns not yet running. Adding a handler creates its subscriber, which
// registers the handler's consumer group on its topic.
func (e *example) wire(pub message.Publisher) (*message.Router, error) {
	var err error
	e.cmdBus, err = cqrs.NewCommandBusWithConfig(pub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return commandTopic(p.CommandName), nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		return nil, err
	}
	e.eventBus, err = cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) {
			return eventTopic(p.EventName), nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		return nil, err
	}

	// The router's info logs would drown the timeline; the example prints its own lines.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	commands, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return commandTopic(p.CommandName), nil
		},
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return e.newSubscriber(p.HandlerName, commandTopic(p.CommandName))
		},
		Marshaler: marshaler,
	})
	if err != nil {
		return nil, err
	}
	events, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return eventTopic(p.EventName), nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return e.newSubscriber(p.HandlerName, eventTopic(p.EventName))
		},
		Marshaler: marshaler,
	})
	if err != nil {
		return nil, err
	}
	if err := commands.AddHandlers(cqrs.NewCommandHandler(commandHandlerName, e.confirmReceipt)); err != nil {
		return nil, err
	}
	if err := events.AddHandlers(cqrs.NewEventHandler(eventHandlerName, e.recordConfirmation)); err != nil {
		return nil, err
	}
	return router, nil
}

// newSubscriber is the processors' SubscriberConstructor: a redisdelay.Subscriber whose consumer
// group is the handler's name. It registers the group on topic at once, so that commands sent
// before the router runs are kept for it.
func (e *example) newSubscriber(group, topic string) (message.Subscriber, error) {
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        e.client,
		KeyPrefix:     e.prefix,
		ConsumerGroup: group,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	if err := sub.SubscribeInitialize(topic); err != nil {
		sub.Close()
		return nil, err
	}
	e.tl.printf("consumer group %q registered on %q", group, topic)
	return sub, nil
}

// sendAndWait sends the first command, starts the router, sends the others, then waits until
// every command's event was received, the deadline passed or ctx was cancelled (Ctrl-C).
func (e *example) sendAndWait(ctx context.Context, router *message.Router) error {
	start := time.Now()
	deadline := start.Add(routerStartsAfter + time.Duration(e.opts.commands-1)*sendSpacing + e.opts.delay + slack)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	if err := e.send(ctx, orderID(1), "router not running yet"); err != nil {
		return err
	}
	routerStart := start.Add(routerStartsAfter)
	if err := sleepUntil(ctx, routerStart); err != nil {
		return err
	}
	if err := e.startRouter(ctx, router); err != nil {
		return err
	}
	e.tl.printf("router running: handlers %q and %q", commandHandlerName, eventHandlerName)
	for i := 2; i <= e.opts.commands; i++ {
		if err := sleepUntil(ctx, routerStart.Add(time.Duration(i-2)*sendSpacing)); err != nil {
			return err
		}
		if err := e.send(ctx, orderID(i), ""); err != nil {
			return err
		}
	}

	select {
	case <-e.stats.allConfirmed:
		e.tl.printf("all %d receipts confirmed and recorded", e.opts.commands)
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("gave up waiting for the commands and events at %s", e.tl.offset(deadline))
		}
		return errors.New("interrupted")
	}
}

// startRouter runs the router in the background and returns once it is running.
func (e *example) startRouter(ctx context.Context, router *message.Router) error {
	e.router = router
	e.routerDone = make(chan error, 1)
	// The router runs until stopRouter closes it, not until ctx ends, so that the shutdown
	// happens in one place.
	go func() { e.routerDone <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
		return nil
	case err := <-e.routerDone:
		e.router = nil
		return fmt.Errorf("router stopped before it was running: %v", err)
	}
}

// stopRouter closes the router, if it was started, and waits for Run to return.
func (e *example) stopRouter() error {
	if e.router == nil {
		return nil
	}
	err := e.router.Close()
	return errors.Join(err, <-e.routerDone)
}

func orderID(i int) string { return fmt.Sprintf("A-%04d", 1000+i) }

// send sends a ConfirmReceipt command for the order, delayed by e.opts.delay.
func (e *example) send(ctx context.Context, id, note string) error {
	// Taken before delay.For and before Publish reads the Redis clock, so the queue's own due
	// time is never earlier than this one: a command handled before it was delivered early.
	notBefore := time.Now().Add(e.opts.delay)
	e.stats.sent(id, notBefore)
	if err := e.cmdBus.Send(delay.WithContext(ctx, delay.For(e.opts.delay)), &ConfirmReceipt{OrderID: id}); err != nil {
		return fmt.Errorf("send ConfirmReceipt{%s}: %w", id, err)
	}
	if note != "" {
		note = " (" + note + ")"
	}
	e.tl.printf("sent ConfirmReceipt{%s}, delay %s, due at %s%s", id, e.opts.delay, e.tl.offset(notBefore), note)
	return nil
}

// confirmReceipt is the command handler: it confirms the receipt and publishes
// ReceiptConfirmed. An error would nack the command, and the queue would deliver it again.
func (e *example) confirmReceipt(ctx context.Context, cmd *ConfirmReceipt) error {
	started := time.Now()
	// The processor puts the message the command came in on the context: it carries the
	// adapter's delivery metadata.
	msg := cqrs.OriginalMessageFromCtx(ctx)
	late, known := e.stats.delivered(cmd.OrderID, started)
	if !known {
		e.tl.printf("command ConfirmReceipt{%s} was never sent by this run; ignoring it", cmd.OrderID)
		return nil
	}
	e.tl.printf("command ConfirmReceipt{%s} handled by %q: %s (attempt %s, queue due time %s)",
		cmd.OrderID, commandHandlerName, describeLateness(late),
		msg.Metadata.Get(redisdelay.AttemptMetadataKey), e.dueOffset(msg))
	if err := e.eventBus.Publish(ctx, &ReceiptConfirmed{OrderID: cmd.OrderID, ConfirmedAt: started}); err != nil {
		return fmt.Errorf("publish ReceiptConfirmed{%s}: %w", cmd.OrderID, err)
	}
	return nil
}

// recordConfirmation is the event handler: it records the confirmation.
func (e *example) recordConfirmation(_ context.Context, evt *ReceiptConfirmed) error {
	e.tl.printf("event ReceiptConfirmed{%s} recorded by %q (confirmed at %s)", evt.OrderID, eventHandlerName, e.tl.offset(evt.ConfirmedAt))
	e.stats.recorded(evt.OrderID)
	return nil
}

// dueOffset is the due time the queue delivered msg for (DueTimeMetadataKey, on the Redis
// clock), on the timeline.
func (e *example) dueOffset(msg *message.Message) string {
	if msg == nil {
		return "unknown"
	}
	due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
	if err != nil {
		return "unknown"
	}
	return e.tl.offset(due)
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

// commandStats collects what the summary reports, safe for concurrent use.
type commandStats struct {
	commands     int
	allConfirmed chan struct{} // closed once every command's event was recorded

	mu         sync.Mutex
	notBefore  map[string]time.Time // sent commands: the earliest time their handler may start
	lateness   map[string]time.Duration
	early      int
	duplicates int
	events     map[string]bool
}

func newCommandStats(commands int) *commandStats {
	return &commandStats{
		commands:     commands,
		allConfirmed: make(chan struct{}),
		notBefore:    map[string]time.Time{},
		lateness:     map[string]time.Duration{},
		events:       map[string]bool{},
	}
}

func (s *commandStats) sent(id string, notBefore time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notBefore[id] = notBefore
}

// delivered records a delivery of id's command that started at started, and returns how late
// it started (early when negative); known is false for a command this run did not send.
func (s *commandStats) delivered(id string, started time.Time) (late time.Duration, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nb, known := s.notBefore[id]
	if !known {
		return 0, false
	}
	late = started.Sub(nb)
	if late < 0 {
		s.early++
	}
	if _, again := s.lateness[id]; again {
		s.duplicates++ // at least once: a command can come again after a failure or a crash
		return late, true
	}
	s.lateness[id] = late
	return late, true
}

func (s *commandStats) recorded(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events[id] {
		return
	}
	s.events[id] = true
	if len(s.events) == s.commands {
		close(s.allConfirmed)
	}
}

// summarize prints the summary to w and returns an error when the run failed: a command not
// delivered, a command delivered early, or an event not received.
func (s *commandStats) summarize(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sorted := slices.Sorted(maps.Values(s.lateness))
	fmt.Fprintln(w, "\nsummary")
	fmt.Fprintf(w, "  commands sent                 %d (1 before the router started)\n", len(s.notBefore))
	fmt.Fprintf(w, "  commands delivered            %d/%d\n", len(s.lateness), s.commands)
	fmt.Fprintf(w, "  early                         %d\n", s.early)
	fmt.Fprintf(w, "  duplicates                    %d\n", s.duplicates)
	fmt.Fprintf(w, "  lateness p50                  %s\n", millis(percentile(sorted, 50)))
	fmt.Fprintf(w, "  lateness max                  %s\n", millis(percentile(sorted, 100)))
	fmt.Fprintf(w, "  events received               %d/%d\n", len(s.events), s.commands)

	var errs []error
	if n := s.commands - len(s.lateness); n > 0 {
		errs = append(errs, fmt.Errorf("%d of %d commands were never delivered", n, s.commands))
	}
	if s.early > 0 {
		errs = append(errs, fmt.Errorf("%d commands were handled before their delay had passed", s.early))
	}
	if n := s.commands - len(s.events); n > 0 {
		errs = append(errs, fmt.Errorf("%d of %d ReceiptConfirmed events were never received", n, s.commands))
	}
	if len(errs) == 0 {
		fmt.Fprintf(w, "OK: all %d commands delivered after their delay, none early; all %d events received\n", s.commands, s.commands)
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
