package redisdelay

// The Inspector's bulk operations on a consumer group's messages: requeueing its dead letters
// and purging the messages in one state.

import (
	"context"
	"fmt"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Requeue moves dead letters of consumer group on topic back to it, due at once: those refs
// name (MessageInfo.Ref from List with StateDeadLettered), or, with no refs, every dead letter waiting
// on its dead-letter topic (DefaultDeadLetterTopic) for a first consumer group, in chunks of
// 500 per script call. Each is stored anew for that group only, with its dead-letter metadata,
// without a key; a keyed dead letter (a message published with a key to the dead-letter topic)
// frees its key there. It returns how many were requeued; refs that no longer name a dead
// letter are skipped. Errors: an error wrapping ErrNotFound for an unknown topic or group,
// also when the group is removed while Requeue runs, or the Redis error. A chunk that fails
// leaves its dead letters where they were; those of earlier chunks stay requeued.
func (i *Inspector) Requeue(ctx context.Context, topic, group string, refs ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	return i.requeue(ctx, info, group, refs)
}

// requeue is Requeue once group was found on the topic of info. The script checks the group
// again: it may have been removed since.
func (i *Inspector) requeue(ctx context.Context, info TopicInfo, group string, refs []string) (int64, error) {
	topic := info.Topic
	byPartition := map[int][]store.Ref{}
	for _, ref := range refs {
		r, ok := store.ParseRef(ref, info.Partitions)
		if !ok {
			return 0, fmt.Errorf("redisdelay: dead letter %s of group %s on topic %s: %w", quote(ref), quote(group), quote(topic), ErrNotFound)
		}
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	var moved int64
	for p := 0; p < info.Partitions; p++ {
		g := store.Partition{Topic: topic, N: p}.Of(group)
		var n int64
		var err error
		if len(refs) > 0 {
			n, err = i.requeueRefs(ctx, g, byPartition[p])
		} else {
			n, err = i.requeueEvery(ctx, g)
		}
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// requeueRefs moves the dead letters of group g that refs name back to it, requeueChunk per
// script call, and returns how many it moved.
func (i *Inspector) requeueRefs(ctx context.Context, g store.Group, refs []store.Ref) (int64, error) {
	var moved int64
	for k := 0; k < len(refs); k += requeueChunk {
		n, err := i.requeueCall(ctx, g, refs[k:min(k+requeueChunk, len(refs))])
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// requeueEvery moves every dead letter of group g back to it, requeueChunk per script call,
// and returns how many it moved.
func (i *Inspector) requeueEvery(ctx context.Context, g store.Group) (int64, error) {
	dead := store.Parked(deadLetterPartition(g))
	var moved int64
	for {
		rows, _, _, err := i.store.List(ctx, dead, store.All, store.Cursor{}, requeueChunk, 0, listReadBudget)
		if err != nil {
			return moved, err
		}
		if len(rows) == 0 {
			return moved, nil
		}
		chunk := make([]store.Ref, len(rows))
		for n, r := range rows {
			chunk[n] = store.RefOf(g.N, r.Member, r.ScoreUs)
		}
		n, err := i.requeueCall(ctx, g, chunk)
		moved += n
		if err != nil {
			return moved, err
		}
	}
}

// requeueCall moves the dead letters of group g that chunk names back to it in one script
// call, and returns how many it moved.
func (i *Inspector) requeueCall(ctx context.Context, g store.Group, chunk []store.Ref) (int64, error) {
	deadPart := deadLetterPartition(g)
	members, err := i.wholeMembers(ctx, store.Parked(deadPart), chunk)
	var moved int64
	if err == nil && len(members) > 0 {
		moved, err = i.store.Requeue(ctx, g, deadPart, members)
	}
	if err != nil {
		return moved, fmt.Errorf("redisdelay: requeue dead letters of group %s on topic %s: %w", quote(g.Name), quote(g.Topic), err)
	}
	return moved, nil
}

// requeueChunk is how many dead letters one requeue.lua call moves.
const requeueChunk = 500

// Purge drops the messages of consumer group on topic in one state (StateScheduled, StateDue or
// StateInFlight), for that group only, 1,000 per script call; each stored message
// goes once no other group holds it, and a batch it drops is closed, so that the next item of
// its batch key opens a new batch. It returns how many were dropped. Errors: an error wrapping
// ErrNotFound for an unknown topic or group (also when the group is removed while Purge runs),
// a bad state, or the Redis error; a purge cut short by OperationTimeout can be repeated.
func (i *Inspector) Purge(ctx context.Context, topic, group string, state State) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	info, err := i.group(ctx, topic, group)
	if err != nil {
		return 0, err
	}
	return i.purge(ctx, info, group, state)
}

// purge is Purge once group was found on the topic of info. The script checks the group
// again: it may have been removed since.
func (i *Inspector) purge(ctx context.Context, info TopicInfo, group string, state State) (int64, error) {
	topic := info.Topic
	if state == StateDeadLettered {
		return 0, fmt.Errorf("redisdelay: purge: dead letters are a topic of their own (%s): %w", quote(DefaultDeadLetterTopic(topic, group)), ErrInvalidName)
	}
	var dropped int64
	for p := 0; p < info.Partitions; p++ {
		set, span, err := listTarget(store.Partition{Topic: topic, N: p}.Of(group), state)
		if err != nil {
			return dropped, err
		}
		for {
			n, left, more, err := i.store.Purge(ctx, set, span, removeGroupChunk)
			dropped += n
			if err != nil {
				return dropped, fmt.Errorf("redisdelay: purge group %s on topic %s: %w", quote(group), quote(topic), err)
			}
			if !more && (left == 0 || n == 0) {
				break
			}
		}
	}
	return dropped, nil
}
