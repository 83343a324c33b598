package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// bykey.go owns the operations on one message named by its key or its ref: cancel, reschedule,
// status, the ref operations, and flushing or cancelling a batch by its batch key.

// KeyResult is what Cancel or Reschedule did: in the parked set and in each consumer group.
type KeyResult struct {
	// Parked is Applied when the message waited in the parked set and was acted on there,
	// else NotFound.
	Parked Outcome
	// Groups holds the outcome in each group, in the order given.
	Groups []Outcome
	// DueUs is Reschedule's new due time, Unix µs on the Redis clock.
	DueUs int64
}

// byKeyTarget returns the keys and arguments that cancel.lua, reschedule.lua and status.lua
// share: the given topic keys, the call key when call has a token, then per group its due set,
// lease set and keyed hash; the call key lifetime (with a token), the key, and (through
// groupTargets) the groups' count, names and wake channels.
func (s Store) byKeyTarget(p Partition, key string, call Call, topicKeys []string, extra []any, groups []string, wake bool) ([]string, []any) {
	var keys []string
	var args []any
	if call.Token != "" {
		keys = append(keys, s.keys.call(p, call.Token))
		args = append(args, call.TTL.Milliseconds())
	}
	keys = append(keys, topicKeys...)
	args = append(append(args, key), extra...)
	return s.groupTargets(keys, args, p, groups, true, wake)
}

// Cancel runs cancel.lua for key on partition p, for the given groups. It returns
// *StaleGroupsError when the view of the groups is stale; nothing is changed then.
func (s Store) Cancel(ctx context.Context, p Partition, key string, call Call, groups []string) (KeyResult, error) {
	tk := s.keys.topic(p)
	keys, args := s.byKeyTarget(p, key, call, []string{tk.messages, tk.refs, tk.groups, tk.parked, tk.history}, nil, groups, false)
	res, err := s.run(ctx, s.client, cancelScript, keys, args...)
	if err != nil {
		return KeyResult{}, err
	}
	return byKeyReply(cancelScript, res, len(groups), 'c')
}

// Reschedule runs reschedule.lua: key's message becomes due at m's schedule in every group that
// holds it due. It returns what it did and the new due time, or *StaleGroupsError.
func (s Store) Reschedule(ctx context.Context, p Partition, key string, call Call, m Outgoing, groups []string) (KeyResult, error) {
	tk := s.keys.topic(p)
	keys, args := s.byKeyTarget(p, key, call, []string{tk.messages, tk.groups, tk.parked, tk.history}, []any{m.scheduleArg(time.Now())}, groups, true)
	res, err := s.run(ctx, s.client, rescheduleScript, keys, args...)
	if err != nil {
		return KeyResult{}, err
	}
	return byKeyReply(rescheduleScript, res, len(groups), 'r')
}

// byKeyReply reads the reply of cancel.lua or reschedule.lua: the state letters, the parked
// set's first, then one per group, done being the letter of Applied; and the due time when the
// script gives one.
func byKeyReply(sc *script, reply any, groups int, done byte) (KeyResult, error) {
	res, _ := reply.([]any)
	if len(res) > 0 {
		if code, _ := res[0].(int64); code == 0 {
			return KeyResult{}, &StaleGroupsError{Groups: asStrings(res[1:])}
		}
	}
	if len(res) < 2 {
		return KeyResult{}, unexpected(sc, reply)
	}
	states, _ := res[1].(string)
	if len(states) != 1+groups {
		return KeyResult{}, fmt.Errorf("script %s: %d states for %d groups", sc.name, len(states), groups)
	}
	r := KeyResult{Parked: NotFound, Groups: make([]Outcome, groups)}
	if states[0] == done {
		r.Parked = Applied
	}
	for n := range r.Groups {
		switch states[1+n] {
		case done:
			r.Groups[n] = Applied
		case 'i':
			r.Groups[n] = InFlight
		case 'f':
			r.Groups[n] = Finished
		default:
			r.Groups[n] = NotFound
		}
	}
	if len(res) > 2 {
		r.DueUs = asInt(res[2])
	}
	return r, nil
}

var forgetKeyScript = mustScript(scriptSpec{file: "forgetkey", allowOOM: true})

// ForgetKey runs forgetkey.lua: it frees key on partition p at once, deleting its history, when
// no message with the key is stored, and reports whether it did.
func (s Store) ForgetKey(ctx context.Context, p Partition, key string) (bool, error) {
	tk := s.keys.topic(p)
	res, err := s.run(ctx, s.client, forgetKeyScript, []string{tk.messages, tk.history + key}, key)
	if err != nil {
		return false, err
	}
	return asInt(res) == 1, nil
}

// KeyState is where one consumer group stands with a keyed message (see Status).
type KeyState int

const (
	// KeyUnknown: nothing is known of a message with the key in the group.
	KeyUnknown KeyState = iota + 1
	// KeyDue: scheduled; TimeUs is its due time, Attempt the attempts so far.
	KeyDue
	// KeyLeased: in flight; TimeUs is its lease deadline, Attempt the attempt under way.
	KeyLeased
	// KeyFinished: the group no longer holds it and keeps no history of it.
	KeyFinished
	// KeyAcked, KeyDeadLettered (for Reason) and KeyCancelled are the group's history of it:
	// it finished so at TimeUs, on attempt Attempt.
	KeyAcked
	KeyDeadLettered
	KeyCancelled
)

// KeyStanding is one group's state with a keyed message.
type KeyStanding struct {
	State   KeyState
	TimeUs  int64 // Unix µs on the Redis clock; see KeyState
	Attempt int64
	Reason  string // KeyDeadLettered
}

// KeyStatus is what Status read of the message with a key.
type KeyStatus struct {
	// Live is set while a message with the key is held by some group, parked, or kept by the
	// new-group window.
	Live bool
	// ParkedUs is its due time in the parked set, -1 when it is not parked.
	ParkedUs int64
	// Groups holds each group's state, in the order given.
	Groups []KeyStanding
}

// Status runs status.lua: where each of the given groups of partition p stands with the
// message that has key. It only reads.
func (s Store) Status(ctx context.Context, p Partition, key string, groups []string) (KeyStatus, error) {
	tk := s.keys.topic(p)
	keys, args := s.byKeyTarget(p, key, Call{}, []string{tk.messages, tk.parked, tk.history}, nil, groups, false)
	reply, err := s.run(ctx, s.client, statusScript, keys, args...)
	if err != nil {
		return KeyStatus{}, err
	}
	res, _ := reply.([]any)
	if len(res) != 2+4*len(groups) {
		return KeyStatus{}, fmt.Errorf("script %s: unexpected reply of %d values for %d groups", statusScript.name, len(res), len(groups))
	}
	st := KeyStatus{Live: asInt(res[0]) == 1, ParkedUs: asInt(res[1]), Groups: make([]KeyStanding, len(groups))}
	for i := range st.Groups {
		r := res[2+4*i:]
		state, _ := r[0].(string)
		if len(state) != 1 {
			return KeyStatus{}, fmt.Errorf("script %s: unexpected state %v", statusScript.name, r[0])
		}
		record, _ := r[3].(string)
		if st.Groups[i], err = keyStanding(state[0], asInt(r[1]), asInt(r[2]), record); err != nil {
			return KeyStatus{}, err
		}
	}
	return st, nil
}

// keyStanding decodes one group's reply of status.lua: its state letter, time and attempt, or
// its history record.
func keyStanding(state byte, timeUs, attempt int64, record string) (KeyStanding, error) {
	switch state {
	case 'd':
		return KeyStanding{State: KeyDue, TimeUs: timeUs, Attempt: attempt}, nil
	case 'l':
		return KeyStanding{State: KeyLeased, TimeUs: timeUs, Attempt: attempt}, nil
	case 'f':
		return KeyStanding{State: KeyFinished}, nil
	case 'n':
		return KeyStanding{State: KeyUnknown}, nil
	case 'h':
		return historyRecord(record)
	}
	return KeyStanding{}, fmt.Errorf("unknown state %q", state)
}

// historyRecord decodes a record that ended.lua wrote: "outcome time attempt[ reason]".
func historyRecord(record string) (KeyStanding, error) {
	f := strings.SplitN(record, " ", 4)
	if len(f) < 3 {
		return KeyStanding{}, fmt.Errorf("malformed history record %q", record)
	}
	us, err1 := strconv.ParseInt(f[1], 10, 64)
	attempt, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return KeyStanding{}, fmt.Errorf("malformed history record %q: %w", record, err)
	}
	ks := KeyStanding{TimeUs: us, Attempt: int64(attempt)}
	switch f[0] {
	case finishedAcked:
		ks.State = KeyAcked
	case finishedDeadLettered:
		ks.State = KeyDeadLettered
		if len(f) == 4 {
			ks.Reason = f[3]
		}
	case finishedCancelled:
		ks.State = KeyCancelled
	default:
		return KeyStanding{}, fmt.Errorf("malformed history record %q", record)
	}
	return ks, nil
}

// KeyedMember returns the member under which group g holds the keyed message with key: the one
// its keyed hash names once it claimed it, else the never-claimed ID:0 of the message the key's
// field holds. It returns an error wrapping ErrNotFound when no message has the key. (Two
// reads, not atomic: the member may have moved on by the time it is used.)
func (s Store) KeyedMember(ctx context.Context, g Group, key string) (string, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	return bounded(ctx, s.contextTimeouts, func(ctx context.Context) (string, error) {
		if m, err := s.client.HGet(ctx, gk.keyed, key).Result(); err == nil {
			return m, nil
		} else if !errors.Is(err, redis.Nil) {
			return "", classify(err)
		}
		v, err := s.client.HGet(ctx, tk.messages, keyedField(key)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", classify(err)
		}
		m, ok := keyedMember(key, v)
		if !ok {
			return "", fmt.Errorf("key %s: %w", Quote(key), ErrNotFound)
		}
		return m, nil
	})
}

// RefOp is an operation on the message a ref names (see Store.RefOp).
type RefOp string

const (
	// RefCancel cancels the message in its group.
	RefCancel RefOp = "cancel"
	// RefReschedule makes it due at a new time in its group.
	RefReschedule RefOp = "reschedule"
)

// RefOp runs refop.lua: op for the message named member in group g, RefReschedule to m's
// schedule; either closes the batch it names if that batch is still open. It returns the
// outcome (Applied, InFlight or NotFound) and the new due time (µs, -1 if unchanged), or an
// error wrapping ErrNotFound, with nothing written, when the group is not registered on the
// partition.
func (s Store) RefOp(ctx context.Context, g Group, op RefOp, member string, call Call, m Outgoing) (Outcome, int64, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	keys := []string{s.keys.call(g.Partition, call.Token), gk.due, gk.lease, tk.messages, tk.refs, gk.keyed, tk.history, tk.groups, tk.batches}
	res, err := s.run(ctx, s.client, refOpScript, keys, call.TTL.Milliseconds(), string(op), member, g.Name, m.scheduleArg(time.Now()), gk.wakeChannel)
	if err != nil {
		return 0, 0, err
	}
	r, _ := res.([]any)
	if len(r) != 2 {
		return 0, 0, unexpected(refOpScript, res)
	}
	state, _ := r[0].(string)
	switch state {
	case "g":
		return 0, 0, fmt.Errorf("consumer group %s: %w", Quote(g.Name), ErrNotFound)
	case "d":
		return Applied, asInt(r[1]), nil
	case "i":
		return InFlight, asInt(r[1]), nil
	case "n":
		return NotFound, asInt(r[1]), nil
	}
	return 0, 0, unexpected(refOpScript, res)
}

// BatchOp is an operation on the open batch of a batch key (see Store.BatchOp).
type BatchOp string

const (
	// BatchFlush releases the batch now.
	BatchFlush BatchOp = "flush"
	// BatchCancel drops the batch with its items.
	BatchCancel BatchOp = "cancel"
)

// BatchOp runs flushbatch.lua: op on the open batch of batch key bk on partition p, for the
// given groups. It returns how many items the batch held, 0 when none was open, or
// *StaleGroupsError.
func (s Store) BatchOp(ctx context.Context, p Partition, call Call, op BatchOp, bk string, groups []string) (int, error) {
	tk := s.keys.topic(p)
	keys := []string{s.keys.call(p, call.Token), tk.messages, tk.refs, tk.groups, tk.parked, tk.batches, tk.history}
	args := []any{call.TTL.Milliseconds(), string(op), bk, len(groups)}
	for _, g := range groups {
		keys = append(keys, s.keys.group(p.Of(g)).due)
		args = append(args, g)
	}
	for _, g := range groups {
		args = append(args, s.keys.group(p.Of(g)).wakeChannel)
	}
	res, err := s.run(ctx, s.client, flushBatchScript, keys, args...)
	if err != nil {
		return 0, err
	}
	r, _ := res.([]any)
	if len(r) > 0 {
		if code, _ := r[0].(int64); code == 0 {
			return 0, &StaleGroupsError{Groups: asStrings(r[1:])}
		}
	}
	if len(r) != 2 {
		return 0, unexpected(flushBatchScript, res)
	}
	return int(asInt(r[1])), nil
}

// Unfar runs unfar.lua: it moves the message that ref names from group g's compact tier into
// the group's due set at its due time (ref.ScoreUs), so that RefOp can act on it, and returns
// its whole member; "" when the group is not registered or its tier holds no such message
// (within the bounds of far_find: 16 buckets, 10,000 entries).
func (s Store) Unfar(ctx context.Context, g Group, ref Ref) (string, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	res, err := s.run(ctx, s.client, unfarScript, []string{gk.due, gk.far, tk.groups}, ref.Member, ref.ScoreUs, g.Name)
	if errors.Is(err, redis.Nil) {
		return "", nil // the script's false: nothing moved
	}
	if err != nil {
		return "", err
	}
	m, _ := res.(string)
	return m, nil
}
