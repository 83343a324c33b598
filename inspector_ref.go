package redisdelay

// The Inspector's operations on one message of one consumer group, named by the ref that List
// shows: cancel, reschedule, run now.

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// CancelRef cancels the message that ref (MessageInfo.Ref) names, in its consumer group only,
// with or without a key: OutcomeApplied when it was due, OutcomeInFlight when a consumer held it (its
// lease is removed, as Cancel does), OutcomeNotFound when the group no longer holds it. A batch
// still open for its batch key is closed (as by RescheduleRef and RunNowRef): later items of
// the key open a new batch, and the other groups receive this one, with the items it has, at
// its due time. A second run of the script after a lost reply returns the first run's outcome.
// Errors: an error wrapping ErrNotFound for an unknown topic, group or malformed ref, also when
// the group is removed while the call runs (checked in the same script as the write, which
// then writes nothing), or the Redis error, within OperationTimeout. A message in the group's
// compact tier (see PublisherConfig.CompactHorizon), named by the ref List gave it there, first
// moves into the group's due set at its due time (unfar.lua: it reads at most 16 time buckets
// and 10,000 of their entries to find it, else OutcomeNotFound), then the operation acts on it
// there: two script calls.
func (i *Inspector) CancelRef(ctx context.Context, topic, group, ref string) (Outcome, error) {
	o, _, err := i.refOp(ctx, topic, group, ref, store.RefCancel, store.Outgoing{})
	return o, err
}

// RescheduleRef makes the message that ref names due at dueAt (Redis clock; past means at once)
// in its consumer group only, keeping its attempt count; it returns the outcome and the new due
// time. A message in flight is left alone (OutcomeInFlight). A batch still open for its batch key
// is closed, earlier or later: later items of the key open a new batch, so none joins a batch
// whose delivery has moved. Errors, and messages in the compact tier, as for CancelRef; a dueAt
// more than MaxDelay after the client's clock now is refused with an error wrapping
// ErrBeyondMaxDelay that names it.
func (i *Inspector) RescheduleRef(ctx context.Context, topic, group, ref string, dueAt time.Time) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{At: dueAt})
}

// RunNowRef makes the message that ref names due at once in its consumer group. A batch still
// open for its batch key is closed, as by RescheduleRef. Errors, and messages in the compact
// tier, as for CancelRef.
func (i *Inspector) RunNowRef(ctx context.Context, topic, group, ref string) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{})
}

// refOp runs op on the message that ref names in group on topic, for CancelRef, RescheduleRef
// and RunNowRef.
func (i *Inspector) refOp(ctx context.Context, topic, group, ref string, op store.RefOp, when store.Outgoing) (Outcome, time.Time, error) {
	if err := checkDueAt(when); err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, time.Time{}, err
	}
	r, ok := store.ParseRef(ref, info.Partitions)
	if !ok {
		return 0, time.Time{}, fmt.Errorf("redisdelay: message %s of group %s on topic %s: %w", quote(ref), quote(group), quote(topic), ErrNotFound)
	}
	g := store.Partition{Topic: topic, N: r.Partition}.Of(group)
	member, err := i.wholeMember(ctx, store.Due(g), r)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	call := store.Call{Token: store.NewToken(), TTL: i.callTTL}
	o, dueUs, err := i.store.RefOp(ctx, g, op, member, call, when)
	if err == nil && o == store.NotFound && (r.Short || r.Dated) {
		// A message of the compact tier moves into the due set first (where it would go anyway
		// before its time), then the operation acts on it there.
		var moved string
		if moved, err = i.store.Unfar(ctx, g, r); err == nil && moved != "" {
			call = store.Call{Token: store.NewToken(), TTL: i.callTTL}
			o, dueUs, err = i.store.RefOp(ctx, g, op, moved, call, when)
		}
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	var due time.Time
	if dueUs >= 0 {
		due = time.UnixMicro(dueUs)
	}
	outcome := outcomeOf(o)
	recordActedIn(i.config.Metrics, op == store.RefCancel, topic, group, outcome)
	return outcome, due, nil
}
