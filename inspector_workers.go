package redisdelay

// This file owns Inspector.Workers: one page of the records of the running Subscribers and
// Schedulers (see workers.go).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// WorkersOptions selects a page of Inspector.Workers.
type WorkersOptions struct {
	// Limit is the most records on the page; DefaultListLimit when zero, at most MaxListLimit.
	Limit int
	// Cursor is WorkersPage.NextCursor of the previous page, "" for the first.
	Cursor string
	// Kind, when not "", lists only the workers of that kind.
	Kind WorkerKind
}

// WorkersPage is one page of Inspector.Workers.
type WorkersPage struct {
	// Workers are ordered by kind (schedulers first), then by ID.
	Workers []WorkerInfo
	// NextCursor continues after this page; "" when there is nothing more.
	NextCursor string
}

// Workers returns one page of the worker records under the Inspector's key prefix: every
// running Subscriber (from its first Subscribe until Close) and Scheduler (while Run runs), as
// each last refreshed its record (see SubscriberConfig.WorkerHeartbeat). A process that died
// without Close keeps its record until it expires, WorkerRecordLifetimes heartbeats after its
// last refresh on the Redis clock. It reads one page in one script call, within
// OperationTimeout; a page holds at most Limit records, fewer when some of those it read had
// expired, and a record refreshed between two pages shows as of its refresh. Errors: one naming
// a malformed cursor or an unknown Kind, or the Redis error.
func (i *Inspector) Workers(ctx context.Context, opts WorkersOptions) (WorkersPage, error) {
	if opts.Kind != "" && opts.Kind != WorkerSubscriber && opts.Kind != WorkerScheduler {
		return WorkersPage{}, fmt.Errorf("redisdelay: workers: unknown kind %s, want %q or %q", quote(string(opts.Kind)), WorkerSubscriber, WorkerScheduler)
	}
	after, err := decodeWorkersCursor(opts.Cursor)
	if err != nil {
		return WorkersPage{}, fmt.Errorf("redisdelay: workers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	recs, _, next, err := i.store.ListWorkers(ctx, string(opts.Kind), after, listLimit(opts.Limit))
	if err != nil {
		return WorkersPage{}, fmt.Errorf("redisdelay: workers: %w", err)
	}
	page := WorkersPage{Workers: make([]WorkerInfo, 0, len(recs))}
	for _, r := range recs {
		if w, ok := workerInfoOf(r); ok {
			page.Workers = append(page.Workers, w)
		} else {
			i.logger.Error("Skipped a malformed worker record", nil, nil)
		}
	}
	if next != "" {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return page, nil
}

// decodeWorkersCursor returns the member a Workers cursor continues after, "" for none.
func decodeWorkersCursor(cursor string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	kind, id, ok := strings.Cut(string(b), " ")
	if cursor != "" && (err != nil || !ok || kind == "" || id == "" || len(b) > maxCursorMember) {
		return "", fmt.Errorf("malformed cursor %s", quote(cursor))
	}
	return string(b), nil
}

// workerInfoOf decodes a record; ok is false for a malformed one.
func workerInfoOf(r store.WorkerRecord) (WorkerInfo, bool) {
	var rec workerRecord
	if err := json.Unmarshal([]byte(r.Record), &rec); err != nil {
		return WorkerInfo{}, false
	}
	w := WorkerInfo{
		ID: r.ID, Kind: WorkerKind(r.Kind), Consumer: rec.Consumer, Host: rec.Host, PID: rec.PID,
		Started: time.UnixMilli(rec.StartedMs), LastBeat: time.UnixMilli(r.BeatMs), Expires: time.UnixMilli(r.ExpiresMs),
		SubscriptionsOmitted: rec.Omitted, InFlight: rec.InFlight, LeaseTimeout: time.Duration(rec.LeaseMs) * time.Millisecond,
	}
	w.Subscriptions = make([]WorkerSubscription, len(rec.Subscriptions))
	for j, s := range rec.Subscriptions {
		w.Subscriptions[j] = WorkerSubscription{Topic: s.Topic, Group: s.Group}
	}
	return w, true
}
