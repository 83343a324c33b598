package redisdelay

// The Inspector's actions on one message of one consumer group, named by the ref that List
// shows (ByRef): cancel, reschedule, run now.

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// refOp runs op on the message that t (ByRef) names, for Cancel, Reschedule, RescheduleAfter
// and RunNow; when was checked.
func (i *Inspector) refOp(ctx context.Context, topic string, t Target, op store.RefOp, when store.Outgoing) (ActionResult, error) {
	r := ActionResult{Topic: topic, Target: t}
	if t.group == ParkedGroup {
		// A parked message is no group's yet: act on it by key, or read it.
		return r, unsupported(string(op), topic, t)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, t.group)
	if err != nil {
		return r, err
	}
	ref, ok := store.ParseRef(t.name, info.Partitions)
	if !ok {
		return r, fmt.Errorf("redisdelay: %s on topic %s: %w", t.describe(), quote(topic), ErrNotFound)
	}
	g := store.Partition{Topic: topic, N: ref.Partition}.Of(t.group)
	o, dueUs, err := i.refCall(ctx, g, ref, op, when)
	if err != nil {
		return r, fmt.Errorf("redisdelay: %s %s on topic %s: %w", op, t.describe(), quote(topic), err)
	}
	if dueUs >= 0 {
		r.DueAt = time.UnixMicro(dueUs)
	}
	outcome := outcomeOf(o)
	r.Groups = map[string]Outcome{t.group: outcome}
	recordActedIn(i.config.Metrics, op == store.RefCancel, topic, t.group, outcome)
	return r, nil
}

// refCall runs op on the message ref names in group g. A message of the compact tier moves
// into the due set first (where it would go anyway before its time), then op acts on it there.
func (i *Inspector) refCall(ctx context.Context, g store.Group, ref store.Ref, op store.RefOp, when store.Outgoing) (store.Outcome, int64, error) {
	member, err := i.wholeMember(ctx, store.Due(g), ref)
	if err != nil {
		return 0, -1, err
	}
	call := store.Call{Token: store.NewToken(), TTL: i.callTTL}
	o, dueUs, err := i.store.RefOp(ctx, g, op, member, call, when)
	if err != nil || o != store.NotFound || !(ref.Short || ref.Dated) {
		return o, dueUs, err
	}
	moved, err := i.store.Unfar(ctx, g, ref)
	if err != nil || moved == "" {
		return o, dueUs, err
	}
	call = store.Call{Token: store.NewToken(), TTL: i.callTTL}
	return i.store.RefOp(ctx, g, op, moved, call, when)
}
