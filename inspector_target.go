package redisdelay

// The Inspector's actions on what a Target names (target.go): Cancel, Reschedule,
// RescheduleAfter and RunNow, each dispatching to the key (inspector_key.go), ref
// (inspector_ref.go) or batch action; the action on an open batch (ByBatchKey) is here.

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Cancel cancels what t names on topic, so that no consumer group receives it afterwards:
//   - ByKey: the message with the key in every group. In a group that holds it due (first
//     attempt, or waiting for a retry) it is removed (OutcomeApplied). In a group that holds it
//     in flight the delivery under way finishes (one claimed but not yet handed to the handler
//     may not be handed out), but its Ack or Nack is refused and it never comes back
//     (OutcomeInFlight). The message is deleted once no group holds it, and the key is free
//     again, or keeps its history for PublisherConfig.KeyRetention, recorded as cancelled in
//     each group that held it.
//   - ByRef: the message in its group only, with or without a key: OutcomeApplied when it was
//     due, OutcomeInFlight when a consumer held it (its lease is removed, as by key),
//     OutcomeNotFound when the group no longer holds it. A batch still open for its batch key
//     is closed (as by Reschedule and RunNow): later items of the key open a new batch, and the
//     other groups receive this one, with the items it has, at its due time. A message in the
//     group's compact tier (PublisherConfig.CompactHorizon), named by the ref List gave it
//     there, first moves into the group's due set at its due time (unfar.lua: it reads at most
//     16 time buckets and 10,000 of their entries to find it, else OutcomeNotFound): two
//     script calls.
//   - ByBatchKey: drops the open batch with its items; ActionResult.BatchItems says how many.
//
// Each is one atomic script (two for the compact tier) on the topic's hash slot; a second run
// after a lost reply returns the first run's result. Errors name the topic and target: one
// wrapping ErrInvalidName or ErrInvalidKey for bad input, ErrNotFound for an unknown topic or
// group or a malformed ref (also when the group is removed while the call runs: the script
// then writes nothing), ErrUnsupportedTarget for another target, ErrOutcomeUnknown when the
// call timed out after it was sent (it ran whole or not at all; calling it again is safe), or
// the Redis error. It returns within OperationTimeout.
func (i *Inspector) Cancel(ctx context.Context, topic string, t Target) (ActionResult, error) {
	switch t.kind {
	case targetKey:
		return i.cancelKey(ctx, topic, t)
	case targetRef:
		return i.refOp(ctx, topic, t, store.RefCancel, store.Outgoing{})
	case targetBatch:
		return i.batchOp(ctx, store.BatchCancel, topic, t)
	}
	return ActionResult{Topic: topic, Target: t}, unsupported("cancel", topic, t)
}

// Reschedule makes the message that t (ByKey or ByRef) names due at dueAt (a past time means
// at once, measured on the Redis clock), keeping its attempt count; earlier or later both
// work, and subscribers that sleep past the new time are woken. By key it acts in every group
// that holds the message due, a message waiting for a retry included; by ref in its group
// only. A group that holds it in flight keeps it (OutcomeInFlight). A batch still open for its
// batch key is closed, earlier or later: later items of the key open a new batch, so none
// joins a batch whose delivery has moved. Microsecond precision. Errors as for Cancel, and one
// wrapping ErrBeyondMaxDelay, naming it, for a dueAt more than MaxDelay after the client's
// clock now.
func (i *Inspector) Reschedule(ctx context.Context, topic string, t Target, dueAt time.Time) (ActionResult, error) {
	return i.reschedule(ctx, "reschedule", topic, t, store.Outgoing{At: dueAt})
}

// RescheduleAfter is Reschedule with a due time of delay after the Redis clock now; a delay of
// 0 or less means at once, one of more than MaxDelay is refused (ErrBeyondMaxDelay).
func (i *Inspector) RescheduleAfter(ctx context.Context, topic string, t Target, delay time.Duration) (ActionResult, error) {
	return i.reschedule(ctx, "reschedule", topic, t, store.Outgoing{Delay: delay})
}

// RunNow makes the message that t names due at once: RescheduleAfter with no delay for ByKey
// and ByRef. For ByBatchKey it releases the open batch now, to every consumer group, with
// trigger BatchTriggerFlush (ActionResult.BatchItems says how many items it held).
func (i *Inspector) RunNow(ctx context.Context, topic string, t Target) (ActionResult, error) {
	if t.kind == targetBatch {
		return i.batchOp(ctx, store.BatchFlush, topic, t)
	}
	return i.reschedule(ctx, "run now", topic, t, store.Outgoing{})
}

func (i *Inspector) reschedule(ctx context.Context, op, topic string, t Target, when store.Outgoing) (ActionResult, error) {
	r := ActionResult{Topic: topic, Target: t}
	if t.kind != targetKey && t.kind != targetRef {
		return r, unsupported(op, topic, t)
	}
	if err := checkDueAt(when); err != nil {
		return r, fmt.Errorf("redisdelay: %s %s on topic %s: %w", op, t.describe(), quote(topic), err)
	}
	if t.kind == targetRef {
		return i.refOp(ctx, topic, t, store.RefReschedule, when)
	}
	return i.rescheduleKey(ctx, topic, t, when)
}

// batchOp runs op on the open batch of t (ByBatchKey), for Cancel and RunNow.
func (i *Inspector) batchOp(ctx context.Context, op store.BatchOp, topic string, t Target) (ActionResult, error) {
	r := ActionResult{Topic: topic, Target: t}
	err := i.byKey(ctx, string(op)+" batch", topic, t.name, func(ctx context.Context, part store.Partition, call store.Call, groups []string) error {
		var err error
		r.BatchItems, err = i.store.BatchOp(ctx, part, call, op, t.name, groups)
		return err
	})
	return r, err
}
