package redisdelay

// How the Inspector addresses messages: a Target names what Cancel, Reschedule,
// RescheduleAfter, RunNow, Status and Message act on or read, and ActionResult is what the
// three actions report. The actions are in inspector_target.go.

import (
	"fmt"
	"time"
)

// Target names messages of a topic for an Inspector operation. Build one with ByKey, ByRef,
// ByDeadLetter or ByBatchKey; an operation given the zero Target, or one it does not take,
// returns an error wrapping ErrUnsupportedTarget that names both. Which operation takes what:
//
//	target                     Cancel, Reschedule, RescheduleAfter, RunNow   Status          Message
//	ByKey(key)                 the message in every consumer group           every group     -
//	ByKey(key).InGroup(group)  -                                             that group      yes
//	ByRef(group, ref)          the message in that group only                its group       yes
//	ByRef(ParkedGroup, ref)    - (act by key)                                yes             yes
//	ByDeadLetter(group, ref)   - (Requeue takes dead letters)                -               yes
//	ByBatchKey(batchKey)       Cancel, RunNow: the open batch                -               -
//
// A ref is MessageInfo.Ref as List returns it; MessageInfo.Ref says which target each state's
// refs go in.
type Target struct {
	kind  targetKind
	group string
	// name is the key, ref or batch key.
	name string
}

type targetKind uint8

const (
	targetNone targetKind = iota
	targetKey
	targetGroupKey
	targetRef
	targetDeadLetter
	targetBatch
)

// ByKey names the message with key on a topic: in every consumer group, or in one with
// InGroup.
func ByKey(key string) Target { return Target{kind: targetKey, name: key} }

// ByRef names the message that ref (MessageInfo.Ref from List with StateScheduled, StateDue or
// StateInFlight) names in group, ParkedGroup for a parked message.
func ByRef(group, ref string) Target { return Target{kind: targetRef, group: group, name: ref} }

// ByDeadLetter names the dead letter of group that ref (MessageInfo.Ref from List with
// StateDeadLettered) names: a ref of a message and one of a dead letter can look alike.
func ByDeadLetter(group, ref string) Target {
	return Target{kind: targetDeadLetter, group: group, name: ref}
}

// ByBatchKey names the open batch of batchKey on a topic (PublisherConfig.Batch): the one that
// still takes items. A batch that closed is a message of each group, named by ByRef.
func ByBatchKey(batchKey string) Target { return Target{kind: targetBatch, name: batchKey} }

// InGroup narrows a ByKey target to the message with the key in group; other targets are
// returned as they are.
func (t Target) InGroup(group string) Target {
	if t.kind == targetKey {
		t.kind, t.group = targetGroupKey, group
	}
	return t
}

// describe names the target, for errors.
func (t Target) describe() string {
	switch t.kind {
	case targetKey:
		return "key " + quote(t.name)
	case targetGroupKey:
		return fmt.Sprintf("key %s in group %s", quote(t.name), quote(t.group))
	case targetRef:
		return fmt.Sprintf("message %s of group %s", quote(t.name), quote(t.group))
	case targetDeadLetter:
		return fmt.Sprintf("dead letter %s of group %s", quote(t.name), quote(t.group))
	case targetBatch:
		return "open batch of batch key " + quote(t.name)
	}
	return "no target"
}

// unsupported is the error of operation op given t on topic.
func unsupported(op, topic string, t Target) error {
	return fmt.Errorf("redisdelay: %s %s on topic %s: %w", op, t.describe(), quote(topic), ErrUnsupportedTarget)
}

// ActionResult is what Cancel, Reschedule, RescheduleAfter or RunNow did.
type ActionResult struct {
	Topic  string
	Target Target
	// Groups holds the outcome in each consumer group acted in, by name: every group registered
	// on the topic for ByKey, and ParkedGroup too when the message was parked; the ref's group
	// for ByRef; none for ByBatchKey.
	Groups map[string]Outcome
	// DueAt is the new due time, on the Redis clock, for Reschedule, RescheduleAfter and RunNow;
	// zero when nothing was rescheduled.
	DueAt time.Time
	// BatchItems is how many items the open batch held (ByBatchKey), 0 when none was open (a
	// batch whose MaxWait has passed is no longer open: it is on its way with trigger time).
	BatchItems int
}

// Found reports whether the target named a message (or an open batch).
func (r ActionResult) Found() bool {
	for _, o := range r.Groups {
		if o != OutcomeNotFound {
			return true
		}
	}
	return r.BatchItems > 0
}

// Applied reports whether the operation took effect in at least one group, or on an open
// batch. For Cancel, OutcomeInFlight is not counted, though the message was cancelled there too.
func (r ActionResult) Applied() bool {
	for _, o := range r.Groups {
		if o == OutcomeApplied {
			return true
		}
	}
	return r.BatchItems > 0
}
