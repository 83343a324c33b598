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
// compact tier (see PublisherConfig.CompactHorizon) cannot be cancelled until its time bucket
// moves into the due set, one CompactHorizon or more before its due time: for a ref List gave
// it there, the error wraps ErrNotFound and says so (Cancel by key reaches keyed messages, which
// never wait in the tier).
func (i *Inspector) CancelRef(ctx context.Context, topic, group, ref string) (Outcome, error) {
	o, _, err := i.refOp(ctx, topic, group, ref, store.RefCancel, store.Outgoing{})
	return o, err
}

// RescheduleRef makes the message that ref names due at dueAt (Redis clock; past means at once)
// in its consumer group only, keeping its attempt count; it returns the outcome and the new due
// time. A message in flight is left alone (OutcomeInFlight). A batch still open for its batch key
// is closed, earlier or later: later items of the key open a new batch, so none joins a batch
// whose delivery has moved. Errors as for CancelRef, a message in the compact tier included.
func (i *Inspector) RescheduleRef(ctx context.Context, topic, group, ref string, dueAt time.Time) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{At: dueAt})
}

// RunNowRef makes the message that ref names due at once in its consumer group. A batch still
// open for its batch key is closed, as by RescheduleRef. Errors as for CancelRef, a message in
// the compact tier included.
func (i *Inspector) RunNowRef(ctx context.Context, topic, group, ref string) (Outcome, time.Time, error) {
	return i.refOp(ctx, topic, group, ref, store.RefReschedule, store.Outgoing{})
}

// refOp runs op on the message that ref names in group on topic, for CancelRef, RescheduleRef
// and RunNowRef.
func (i *Inspector) refOp(ctx context.Context, topic, group, ref string, op store.RefOp, when store.Outgoing) (Outcome, time.Time, error) {
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
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(group), quote(topic), err)
	}
	if o == store.NotFound && (r.Short || r.Dated) {
		if err := i.inTier(ctx, g, r, op, ref); err != nil {
			return 0, time.Time{}, err
		}
	}
	var due time.Time
	if dueUs >= 0 {
		due = time.UnixMicro(dueUs)
	}
	outcome := outcomeOf(o)
	i.config.Metrics.acted(op == store.RefCancel, topic, map[string]Outcome{group: outcome})
	return outcome, due, nil
}

// inTier returns an error wrapping ErrNotFound that says so when ref (r) names a message that
// waits in the compact tier of group g, which op cannot reach there; nil when it does not.
func (i *Inspector) inTier(ctx context.Context, g store.Group, r store.Ref, op store.RefOp, ref string) error {
	l, _, found, err := i.store.Show(ctx, store.Due(g), r)
	if err != nil {
		return fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: %w", op, quote(ref), quote(g.Name), quote(g.Topic), err)
	}
	if !found || !l.Far {
		return nil
	}
	return fmt.Errorf("redisdelay: %s message %s of group %s on topic %s: it waits in the compact tier, which the operation cannot change, until its time bucket moves into the due set, one CompactHorizon or more before its due time %s: %w",
		op, quote(ref), quote(g.Name), quote(g.Topic), time.UnixMicro(l.ScoreUs).UTC().Format(time.RFC3339Nano), ErrNotFound)
}
