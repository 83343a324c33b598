package redisdelay

// This file owns the worker records: what a running Subscriber or Scheduler records of itself
// (WorkerInfo), the heartbeat that keeps its record in Redis, and the deletion of the record on
// Close. Inspector.Workers, which reads them, is in inspector_workers.go; the keys and scripts
// are in internal/store (workers.go, worker_beat.lua).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// WorkerKind is what a worker record describes.
type WorkerKind string

const (
	// WorkerSubscriber is a Subscriber made with NewSubscriber.
	WorkerSubscriber WorkerKind = "subscriber"
	// WorkerScheduler is a running schedule.Scheduler (the Subscriber its Run makes).
	WorkerScheduler WorkerKind = "scheduler"
)

// MaxWorkerSubscriptions caps the subscriptions one worker record lists; past it,
// WorkerInfo.SubscriptionsOmitted counts the rest, so that a record and a page of records stay
// small.
const MaxWorkerSubscriptions = 100

// WorkerSubscription is one running subscription of a worker: a topic and the consumer group it
// consumes for. Several Subscribe calls of one Subscriber to one topic are one subscription.
type WorkerSubscription struct{ Topic, Group string }

// WorkerInfo is the heartbeat record of one running Subscriber or Scheduler (see
// Inspector.Workers).
type WorkerInfo struct {
	// ID is unique per Subscriber or Scheduler instance: "host:pid:random".
	ID   string
	Kind WorkerKind
	// Consumer is its consumer name in its consumer group (SubscriberConfig.Consumer).
	Consumer string
	// Host is the host name of its process (os.Hostname) and PID its process ID.
	Host string
	PID  int
	// Started is when it started recording, at its first Subscribe, on its own clock.
	Started time.Time
	// LastBeat is when its record was last refreshed, and Expires when the record is gone
	// unless refreshed again, both on the Redis clock.
	LastBeat time.Time
	Expires  time.Time
	// Subscriptions are its running subscriptions, by topic then group, as of LastBeat; at most
	// MaxWorkerSubscriptions, with SubscriptionsOmitted counting the rest.
	Subscriptions        []WorkerSubscription
	SubscriptionsOmitted int
	// InFlight is how many messages it holds as of LastBeat: claimed under a lease and not yet
	// acked or nacked (handed to a handler, or waiting in its claimed batch).
	InFlight int
	// LeaseTimeout is its SubscriberConfig.LeaseTimeout (for a Scheduler, its
	// schedule.Config.LeaseTimeout).
	LeaseTimeout time.Duration
}

// workerRecord is the JSON a worker writes; Redis adds the expiry and the last beat.
type workerRecord struct {
	Consumer      string                  `json:"consumer"`
	Host          string                  `json:"host"`
	PID           int                     `json:"pid"`
	StartedMs     int64                   `json:"started_ms"`
	Subscriptions []workerSubscriptionRec `json:"subscriptions"`
	Omitted       int                     `json:"omitted,omitempty"`
	InFlight      int                     `json:"in_flight"`
	LeaseMs       int64                   `json:"lease_ms"`
}

type workerSubscriptionRec struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

// worker is what a Subscriber knows of its own record: who it is, its running subscriptions and
// how many messages its subscriptions hold.
type worker struct {
	kind   WorkerKind
	id     string
	record workerRecord // the fields that do not change
	// held counts the messages the Subscriber's lease books hold (see leaseBook.recount).
	held atomic.Int64
	// nudge asks the heartbeat for a refresh now, after a subscription started.
	nudge chan struct{}

	mu      sync.Mutex
	started bool
	subs    map[WorkerSubscription]int // running subscriptions -> Subscribe calls
}

func newWorker(c SubscriberConfig) *worker {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	pid := os.Getpid()
	return &worker{
		kind:   c.kind,
		id:     fmt.Sprintf("%s:%d:%08x", host, pid, rand.Uint32()),
		record: workerRecord{Consumer: c.Consumer, Host: host, PID: pid, LeaseMs: c.LeaseTimeout.Milliseconds()},
		nudge:  make(chan struct{}, 1),
		subs:   map[WorkerSubscription]int{},
	}
}

func (w *worker) member() string { return store.WorkerMember(string(w.kind), w.id) }

// subscribed records a running subscription and reports whether it is the worker's first
// (which starts the heartbeat).
func (w *worker) subscribed(sub WorkerSubscription) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[sub]++
	if !w.started {
		w.started, first = true, true
		w.record.StartedMs = time.Now().UnixMilli()
	}
	select {
	case w.nudge <- struct{}{}:
	default:
	}
	return first
}

// unsubscribed records that a subscription stopped.
func (w *worker) unsubscribed(sub WorkerSubscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[sub]--; w.subs[sub] <= 0 {
		delete(w.subs, sub)
	}
}

// snapshot returns the record as of now, JSON.
func (w *worker) snapshot() string {
	w.mu.Lock()
	rec := w.record
	subs := make([]WorkerSubscription, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool {
		if subs[i].Topic != subs[j].Topic {
			return subs[i].Topic < subs[j].Topic
		}
		return subs[i].Group < subs[j].Group
	})
	if len(subs) > MaxWorkerSubscriptions {
		rec.Omitted, subs = len(subs)-MaxWorkerSubscriptions, subs[:MaxWorkerSubscriptions]
	}
	rec.Subscriptions = make([]workerSubscriptionRec, len(subs))
	for i, s := range subs {
		rec.Subscriptions[i] = workerSubscriptionRec{Topic: s.Topic, Group: s.Group}
	}
	rec.InFlight = int(w.held.Load())
	b, _ := json.Marshal(rec) // plain strings and numbers: cannot fail
	return string(b)
}

// beat refreshes the Subscriber's worker record every WorkerHeartbeat, and at once after a new
// subscription, until Close, then deletes it. A failed refresh is logged once until one
// succeeds; the record expires meanwhile if the failures last.
func (s *Subscriber) beat() {
	defer s.wg.Done()
	ticker := time.NewTicker(s.config.WorkerHeartbeat)
	defer ticker.Stop()
	failing := false
	for {
		// Not cut short by Close: a refresh abandoned mid-call could land after the deletion
		// and leave the record until it expires.
		ctx, cancel := context.WithTimeout(context.Background(), s.config.OperationTimeout)
		ttl := WorkerRecordLifetimes * s.config.WorkerHeartbeat.Milliseconds()
		_, _, err := s.store.BeatWorker(ctx, s.worker.member(), ttl, s.worker.snapshot())
		cancel()
		if err != nil && !failing && s.closing.Err() == nil {
			s.logger.Error("Refreshing the worker record failed, will retry", err, nil)
		}
		failing = err != nil
		select {
		case <-ticker.C:
		case <-s.worker.nudge:
		case <-s.closing.Done():
			s.workerGone()
			return
		}
	}
}

// workerGone deletes the worker record, within OperationTimeout of Close (a refresh under way
// when Close came, which started before it, ends within its own OperationTimeout), over a
// client of its own when the application closed the Redis client first (see
// store.Store.Reopened); a record it cannot delete expires by itself.
func (s *Subscriber) workerGone() {
	s.mu.Lock()
	deadline := s.closedAt.Add(s.config.OperationTimeout)
	s.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, err := s.store.WorkerGone(ctx, s.worker.member())
	if errors.Is(err, redis.ErrClosed) {
		if fallback, closeClient, ok := s.store.Reopened(); ok {
			defer func() { _ = closeClient() }()
			_, err = fallback.WorkerGone(ctx, s.worker.member())
		}
	}
	if err != nil {
		s.logger.Error("Deleting the worker record failed; it expires by itself", err, nil)
	}
}
