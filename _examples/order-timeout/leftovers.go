package main

// This file owns what the example leaves in Redis, for -keep: a backlog of payment checks due
// hours from now, a dead letter and a nightly schedule; the check that they are there; and the
// redisdelay commands that show them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/_examples/internal/exampleredis"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

const (
	// reconcileTopic receives a message at each tick of the nightly schedule reconcileSchedule.
	reconcileTopic    = "order.reconcile"
	reconcileSchedule = "reconcile-unpaid-orders"
	// reconcileSpec is nightly at 02:00, UTC (the schedule names no time zone).
	reconcileSpec = "0 2 * * *"
	// malformedKey is the key of a payment check with no order ID. The handler rejects it at
	// every attempt, so it becomes a dead letter after maxAttempts.
	malformedKey = checkKeyPrefix + "malformed"
	// maxAttempts and nackBackoff are the consumer group's: a check whose handler fails is
	// delivered again 100 ms later, and dead-lettered after its third attempt. A service would
	// wait longer (redisdelay.DefaultNackBackoff); the example wants its dead letter quickly.
	maxAttempts = 3
	nackBackoff = redisdelay.ConstantBackoff(100 * time.Millisecond)
	// pollInterval is how often the example reads the malformed check's state while it waits
	// for the check to be dead-lettered.
	pollInterval = 20 * time.Millisecond
)

// backlogWindows are the payment windows of the orders placed last, one order each: card
// payments get an hour, bank transfers a day. Their checks are still scheduled when the example
// ends.
var backlogWindows = []time.Duration{time.Hour, time.Hour, time.Hour, 24 * time.Hour, 24 * time.Hour}

// subscriberConfig is the order service's consumer group, without the Redis client.
func subscriberConfig(prefix string) redisdelay.SubscriberConfig {
	return redisdelay.SubscriberConfig{
		KeyPrefix:     prefix,
		ConsumerGroup: consumerGroup,
		MaxAttempts:   maxAttempts,
		NackBackoff:   nackBackoff,
	}
}

// backlogOrderID is the ID of the n-th order of the backlog (from 0): they follow the run's
// orders.
func (e *example) backlogOrderID(n int) string {
	return orderID(e.opts.orders + 1 + n)
}

// placeBacklog places one order per backlogWindows, each with a payment check due that long
// from now.
func (e *example) placeBacklog(ctx context.Context) error {
	for n, window := range backlogWindows {
		if err := e.placeOrderWithin(ctx, e.backlogOrderID(n), window); err != nil {
			return err
		}
	}
	return nil
}

// publishMalformedCheck publishes, due now, a payment check whose payload names no order, as a
// faulty producer might.
func (e *example) publishMalformedCheck(ctx context.Context) error {
	payload, err := json.Marshal(paymentCheck{PlacedAt: time.Now()})
	if err != nil {
		return err
	}
	msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), payload), malformedKey)
	msg.SetContext(ctx)
	if err := e.pub.Publish(topic, msg); err != nil {
		return fmt.Errorf("publish the malformed payment check %s: %w", malformedKey, err)
	}
	e.tl.printf("malformed payment check %s published (no order ID), due now", malformedKey)
	return nil
}

// putReconcileSchedule creates the nightly schedule that publishes to reconcileTopic, or leaves
// it as it is when it exists.
func putReconcileSchedule(ctx context.Context, sched *schedule.Scheduler, tl *timeline) error {
	outcome, err := sched.Put(ctx, schedule.Schedule{
		Name:    reconcileSchedule,
		Spec:    reconcileSpec,
		Topic:   reconcileTopic,
		Payload: message.Payload(`{}`),
	})
	if err != nil {
		return err
	}
	tl.printf("schedule %s %s: %q publishes to %s", reconcileSchedule, outcome, reconcileSpec, reconcileTopic)
	return nil
}

// waitDeadLettered waits until the malformed check is a dead letter of the consumer group,
// reading the group's dead letters every pollInterval, or until ctx ends. It returns the dead
// letter. (Its key keeps no history, as the publisher's KeyRetention is 0, so it is found by
// listing, not by key.)
func (e *example) waitDeadLettered(ctx context.Context) (redisdelay.MessageInfo, error) {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		page, err := e.inspector.List(ctx, topic, consumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
		if err != nil {
			return redisdelay.MessageInfo{}, fmt.Errorf("list the dead letters of group %s: %w", consumerGroup, err)
		}
		for _, m := range page.Messages {
			if m.Key == malformedKey {
				e.tl.printf("malformed payment check %s dead-lettered after %d attempts (%s)", malformedKey, m.Attempt, m.Reason)
				return m, nil
			}
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return redisdelay.MessageInfo{}, fmt.Errorf("the malformed payment check %s was not dead-lettered: %w", malformedKey, ctx.Err())
		}
	}
}

// leftovers is what the example leaves in Redis, as the Inspector reads it.
type leftovers struct {
	scheduled, deadLetters int64 // the consumer group's, on topic
	schedules              []schedule.Info
}

// readLeftovers reads what the example leaves in Redis, and returns an error when it is not
// the backlog's checks scheduled, the malformed check dead-lettered and the nightly schedule.
func readLeftovers(ctx context.Context, in *redisdelay.Inspector) (leftovers, error) {
	var left leftovers
	stats, err := in.Stats(ctx, topic)
	if err != nil {
		return left, err
	}
	for _, s := range stats {
		if s.Group == consumerGroup {
			left.scheduled, left.deadLetters = s.Scheduled, s.DeadLetters
		}
	}
	if left.schedules, _, err = schedule.List(ctx, in, "", 10); err != nil {
		return left, err
	}
	var errs []error
	if left.scheduled != int64(len(backlogWindows)) {
		errs = append(errs, fmt.Errorf("group %s of %s has %d checks scheduled, want the backlog's %d", consumerGroup, topic, left.scheduled, len(backlogWindows)))
	}
	if left.deadLetters != 1 {
		errs = append(errs, fmt.Errorf("group %s of %s has %d dead letters, want 1 (%s)", consumerGroup, topic, left.deadLetters, malformedKey))
	}
	if len(left.schedules) != 1 || left.schedules[0].Schedule.Name != reconcileSchedule {
		errs = append(errs, fmt.Errorf("%d schedules, want 1 (%s)", len(left.schedules), reconcileSchedule))
	}
	return left, errors.Join(errs...)
}

// describe returns the summary's lines about what the example leaves in Redis.
func (l leftovers) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  checks scheduled              %d (due in %s)\n", l.scheduled, describeWindows())
	fmt.Fprintf(&b, "  dead letters                  %d (%s, rejected %d times)\n", l.deadLetters, malformedKey, maxAttempts)
	for _, s := range l.schedules {
		fmt.Fprintf(&b, "  schedule                      %s, %q to %s, next tick %s\n", s.Schedule.Name, s.Schedule.Spec, s.Schedule.Topic, s.Pending.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// describeWindows lists the distinct backlog windows, such as "1h and 24h".
func describeWindows() string {
	var windows []string
	for _, w := range backlogWindows {
		if s := shortDuration(w); len(windows) == 0 || windows[len(windows)-1] != s {
			windows = append(windows, s)
		}
	}
	return strings.Join(windows, " and ")
}

// addLooks adds to rd the redisdelay commands that show what the example leaves: firstKey is
// the key of a backlog check, deadRef the dead letter's ref ("" when there is none).
func addLooks(rd *exampleredis.Redis, firstKey, deadRef string) {
	group := []string{"--topic", topic, "--group", consumerGroup}
	rd.Look("the payment checks still scheduled, due in "+describeWindows(), slices.Concat([]string{"list"}, group, []string{"--state", "scheduled"})...)
	rd.Look("one of them, with its metadata and payload", slices.Concat([]string{"show"}, group, []string{"--key", firstKey})...)
	rd.Look(fmt.Sprintf("the dead letter: the malformed check, rejected %d times", maxAttempts), slices.Concat([]string{"list"}, group, []string{"--state", "dead-lettered"})...)
	if deadRef != "" {
		rd.Look("the dead letter, with its reason and payload", slices.Concat([]string{"show"}, group, []string{"--ref", deadRef})...)
	}
	rd.Look("the nightly schedule (no Scheduler runs once the example ends)", "schedules", "list")
	rd.Look("all of it in a browser, at http://127.0.0.1:8080/ (Ctrl-C stops it)", "dashboard")
}
