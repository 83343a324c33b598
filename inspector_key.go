package redisdelay

// The Inspector's operations on the message with a key (ByKey): cancel, reschedule, run now,
// its status in each group, and reading it.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// cancelKey is Cancel by key.
func (i *Inspector) cancelKey(ctx context.Context, topic string, t Target) (ActionResult, error) {
	r := ActionResult{Topic: topic, Target: t}
	err := i.byKey(ctx, "cancel", topic, t.name, func(ctx context.Context, part store.Partition, call store.Call, groups []string) error {
		res, err := i.store.Cancel(ctx, part, t.name, call, groups)
		if err == nil {
			r.Groups = keyOutcomes(res, groups)
		}
		return err
	})
	recordActed(i.config.Metrics, true, topic, r.Groups)
	return r, err
}

// rescheduleKey is Reschedule, RescheduleAfter or RunNow by key, once when was checked.
func (i *Inspector) rescheduleKey(ctx context.Context, topic string, t Target, when store.Outgoing) (ActionResult, error) {
	r := ActionResult{Topic: topic, Target: t}
	err := i.byKey(ctx, "reschedule", topic, t.name, func(ctx context.Context, part store.Partition, call store.Call, groups []string) error {
		res, err := i.store.Reschedule(ctx, part, t.name, call, when, groups)
		if err == nil {
			r.Groups = keyOutcomes(res, groups)
			r.DueAt = time.UnixMicro(res.DueUs)
		}
		return err
	})
	recordActed(i.config.Metrics, false, topic, r.Groups)
	return r, err
}

// byKey checks topic and key, bounds the call by OperationTimeout, and runs op on the key's
// partition with one call token, refreshing the view of the groups when it is stale.
func (i *Inspector) byKey(ctx context.Context, name, topic, key string, op func(ctx context.Context, part store.Partition, call store.Call, groups []string) error) error {
	if err := checkTopicKey(topic, key); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	partitions, err := i.partitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("redisdelay: %s key %s on topic %s: %w", name, quote(key), quote(topic), err)
	}
	part := store.Partition{Topic: topic, N: keyPartition(key, partitions)}
	call := store.Call{Token: store.NewToken(), TTL: i.callTTL}
	err = i.groups.withGroups(ctx, part, func(ctx context.Context, groups []string) error {
		return op(ctx, part, call, groups)
	})
	if err != nil {
		return fmt.Errorf("redisdelay: %s key %s on topic %s: %w", name, quote(key), quote(topic), err)
	}
	return nil
}

// checkDueAt refuses a new due time more than MaxDelay ahead: a delay, or an instant measured
// from the client's clock. It names the value.
func checkDueAt(when store.Outgoing) error {
	ahead, value := when.Delay, when.Delay.String()
	if !when.At.IsZero() {
		ahead, value = time.Until(when.At), when.At.UTC().Format(time.RFC3339Nano)
	}
	if err := checkAhead(ahead); err != nil {
		return fmt.Errorf("due time %s: %w", value, err)
	}
	return nil
}

func checkTopicKey(topic, key string) error {
	if err := ValidateName("topic", topic); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("redisdelay: topic %s: key %s: %w", quote(topic), quote(key), err)
	}
	return nil
}

// keyOutcomes names the outcomes of Cancel or Reschedule by group. The parked set's counts only
// while no group is registered: after that, it is the new-group window's copy (see
// ParkedGroup).
func keyOutcomes(res store.KeyResult, groups []string) map[string]Outcome {
	out := make(map[string]Outcome, len(groups)+1)
	if res.Parked == store.Applied && len(groups) == 0 {
		out[ParkedGroup] = OutcomeApplied
	}
	for n, g := range groups {
		out[g] = outcomeOf(res.Groups[n])
	}
	return out
}

// KeyGroupStatus is one consumer group's state with a message (Status). Times are on the Redis clock,
// microsecond precision; the ones that do not apply to the state are zero.
type KeyGroupStatus struct {
	State         State
	DueAt         time.Time // StateScheduled
	LeaseDeadline time.Time // StateInFlight
	// Attempt is the attempts so far (StateScheduled), the attempt under way (StateInFlight),
	// or the last attempt (acked, dead-lettered, cancelled; 0 if cancelled before any).
	Attempt    int
	FinishedAt time.Time // acked, dead-lettered, cancelled
	Reason     string    // StateDeadLettered
}

// KeyStatus is what Status returns: the state of the message a Target names, in each group
// it asks about. Key is the message's key, "" for a message without one (by ref).
type KeyStatus struct {
	Topic, Key string
	// Live is true while a message with the key is held by some registered group or parked
	// for a first group: its key is taken until then. The new-group window's copy of a message
	// (SubscriberConfig.NewGroupWindow) does not count (docs/guarantees.md, "Keys and the
	// window").
	Live bool
	// Groups holds the status in each consumer group registered on the topic, by name, and
	// under ParkedGroup the parked message's, when it waits for a first group.
	Groups map[string]KeyGroupStatus
}

// Status returns where consumer groups stand with the message that t names on topic:
//   - ByKey: in every group, its live state (scheduled, in flight), or, once a group is done
//     with it and the publisher set PublisherConfig.KeyRetention, the history record (acked,
//     dead-lettered, cancelled) until the retention ends. It reads the groups (SMEMBERS) and
//     then the state in one read-only script. ByKey(key).InGroup(group) keeps that group only.
//   - ByRef: in its group, read as Message reads it: StateScheduled (due now or later) or
//     StateInFlight, with KeyStatus.Live set; an error wrapping ErrNotFound when the group no
//     longer holds it.
//
// Errors as for Cancel.
func (i *Inspector) Status(ctx context.Context, topic string, t Target) (KeyStatus, error) {
	switch t.kind {
	case targetKey, targetGroupKey:
		st, err := i.statusKey(ctx, topic, t.name)
		if err != nil || t.kind == targetKey {
			return st, err
		}
		gs, ok := st.Groups[t.group]
		if !ok {
			return KeyStatus{}, fmt.Errorf("redisdelay: consumer group %s on topic %s: %w", quote(t.group), quote(topic), ErrNotFound)
		}
		st.Groups = map[string]KeyGroupStatus{t.group: gs}
		return st, nil
	case targetRef:
		m, err := i.Message(ctx, topic, t)
		if err != nil {
			return KeyStatus{}, err
		}
		gs := KeyGroupStatus{State: StateScheduled, DueAt: m.DueAt, LeaseDeadline: m.LeaseDeadline, Attempt: m.Attempt}
		if m.State == StateInFlight {
			gs.State = StateInFlight
		}
		return KeyStatus{Topic: topic, Key: m.Key, Live: true, Groups: map[string]KeyGroupStatus{t.group: gs}}, nil
	}
	return KeyStatus{}, unsupported("status of", topic, t)
}

// statusKey is Status by key, in every group.
func (i *Inspector) statusKey(ctx context.Context, topic, key string) (KeyStatus, error) {
	if err := checkTopicKey(topic, key); err != nil {
		return KeyStatus{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	st := KeyStatus{Topic: topic, Key: key, Groups: map[string]KeyGroupStatus{}}
	wrap := func(err error) error {
		return fmt.Errorf("redisdelay: status of key %s on topic %s: %w", quote(key), quote(topic), err)
	}
	partitions, err := i.partitions(ctx, topic)
	if err != nil {
		return st, wrap(err)
	}
	part := store.Partition{Topic: topic, N: keyPartition(key, partitions)}
	groups, err := i.store.Groups(ctx, part)
	if err != nil {
		return st, wrap(err)
	}
	sort.Strings(groups)
	res, err := i.store.Status(ctx, part, key, groups)
	if err != nil {
		return st, wrap(err)
	}
	st.Live = res.Live
	if res.ParkedUs >= 0 && len(groups) == 0 {
		st.Groups[ParkedGroup] = KeyGroupStatus{State: StateScheduled, DueAt: time.UnixMicro(res.ParkedUs)}
	}
	for n, g := range groups {
		st.Groups[g] = groupStatus(res.Groups[n])
	}
	return st, nil
}

// groupStatus names one group's state with a keyed message.
func groupStatus(s store.KeyStanding) KeyGroupStatus {
	at, attempt := time.UnixMicro(s.TimeUs), int(s.Attempt)
	switch s.State {
	case store.KeyDue:
		return KeyGroupStatus{State: StateScheduled, DueAt: at, Attempt: attempt}
	case store.KeyLeased:
		return KeyGroupStatus{State: StateInFlight, LeaseDeadline: at, Attempt: attempt}
	case store.KeyFinished:
		return KeyGroupStatus{State: StateFinished}
	case store.KeyAcked:
		return KeyGroupStatus{State: StateAcked, FinishedAt: at, Attempt: attempt}
	case store.KeyDeadLettered:
		return KeyGroupStatus{State: StateDeadLettered, FinishedAt: at, Attempt: attempt, Reason: s.Reason}
	case store.KeyCancelled:
		return KeyGroupStatus{State: StateCancelled, FinishedAt: at, Attempt: attempt}
	}
	return KeyGroupStatus{State: StateNotFound}
}

// messageByKey is Message for ByKey(key).InGroup(group).
func (i *Inspector) messageByKey(ctx context.Context, topic, group, key string) (MessageInfo, error) {
	st, err := i.statusKey(ctx, topic, key)
	if err != nil {
		return MessageInfo{}, err
	}
	if _, err := i.group(ctx, topic, group); err != nil {
		return MessageInfo{}, err
	}
	gs := st.Groups[group]
	switch gs.State {
	case StateScheduled, StateInFlight:
	case StateNotFound, "":
		return MessageInfo{}, fmt.Errorf("redisdelay: key %s in group %s on topic %s: %w", quote(key), quote(group), quote(topic), ErrNotFound)
	default:
		return MessageInfo{}, fmt.Errorf("redisdelay: key %s in group %s on topic %s (%s): %w", quote(key), quote(group), quote(topic), gs.State, ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	partitions, err := i.partitions(ctx, topic)
	if err != nil {
		return MessageInfo{}, err
	}
	p := keyPartition(key, partitions)
	id, err := i.store.KeyedMember(ctx, store.Partition{Topic: topic, N: p}.Of(group), key)
	if err != nil {
		return MessageInfo{}, err
	}
	return i.show(ctx, topic, group, store.Ref{Partition: p, Member: id}, store.MakeRef(p, id, 0), false)
}
