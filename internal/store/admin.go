package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// admin.go owns the operator's writes and counts: the topic registry, the groups of a
// partition, pause and resume, removing a group, purging, requeueing dead letters, the
// statistics, the Redis clock, and the server's eviction policy (counts by due time are in
// admin_counts.go).

// RegisterTopic records topic and its partition count in the topic registry unless it is there
// already (HSETNX, then HGET when it was: two single-key commands), and returns the partition count the
// registry holds for it: partitions when it was not registered, else the registered one. An
// entry that is not a number is replaced (HSET).
func (s Store) RegisterTopic(ctx context.Context, topic string, partitions int) (int, error) {
	key := s.keys.topicRegistry()
	// Two single-key commands, not a transaction, so that every command stays one the Cluster
	// routes by itself (TestEveryScriptCallStaysInOneSlot): an entry, once a number, never
	// changes, so the HGET after a refused HSETNX reads what another call registered.
	set, err := command(ctx, s, func(ctx context.Context) (bool, error) {
		return s.client.HSetNX(ctx, key, topic, partitions).Result()
	})
	if err != nil || set {
		return partitions, err
	}
	registered, err := command(ctx, s, func(ctx context.Context) (string, error) {
		return s.client.HGet(ctx, key, topic).Result()
	})
	if err != nil {
		return 0, err
	}
	if n, err := strconv.Atoi(registered); err == nil && n > 0 {
		return n, nil
	}
	_, err = command(ctx, s, func(ctx context.Context) (int64, error) {
		return s.client.HSet(ctx, key, topic, partitions).Result()
	})
	return partitions, err
}

// RegisteredTopics reads the topic registry (HGETALL): every topic published to or subscribed,
// with its partition count (0 when the entry is not a number).
func (s Store) RegisteredTopics(ctx context.Context) (map[string]int, error) {
	registry, err := command(ctx, s, func(ctx context.Context) (map[string]string, error) {
		return s.client.HGetAll(ctx, s.keys.topicRegistry()).Result()
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(registry))
	for topic, p := range registry {
		out[topic], _ = strconv.Atoi(p)
	}
	return out, nil
}

// RegisteredPartitions reads topic's entry of the topic registry (HGET): its partition count
// (0 when the entry is not a number), and false when the topic is not in the registry.
func (s Store) RegisteredPartitions(ctx context.Context, topic string) (int, bool, error) {
	p, err := command(ctx, s, func(ctx context.Context) (string, error) {
		return s.client.HGet(ctx, s.keys.topicRegistry(), topic).Result()
	})
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	partitions, _ := strconv.Atoi(p)
	return partitions, true, nil
}

// Groups returns the consumer groups registered on partition p (SMEMBERS), in no order.
func (s Store) Groups(ctx context.Context, p Partition) ([]string, error) {
	return command(ctx, s, func(ctx context.Context) ([]string, error) {
		return s.client.SMembers(ctx, s.keys.topic(p).groups).Result()
	})
}

// SetPaused runs pause.lua for group g. It returns whether the flag changed, or an error
// wrapping ErrNotFound when the group is not registered.
func (s Store) SetPaused(ctx context.Context, g Group, paused bool) (bool, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	flag := 0
	if paused {
		flag = 1
	}
	res, err := s.run(ctx, s.client, pauseScript, []string{tk.groups, gk.paused}, g.Name, flag, gk.wakeChannel)
	if err != nil {
		return false, err
	}
	switch n, _ := res.(int64); n {
	case -1:
		return false, fmt.Errorf("consumer group %s: %w", Quote(g.Name), ErrNotFound)
	case 0, 1:
		return n == 1, nil
	}
	return false, unexpected(pauseScript, res)
}

// RemoveGroup runs removegroup.lua once for group g: the first step (first) unregisters the
// group and moves what it holds to the removal's keys, every step drops up to limit of those
// messages. It returns whether this call unregistered the group, how many messages it dropped
// and how many are left.
func (s Store) RemoveGroup(ctx context.Context, g Group, first bool, limit int) (bool, int64, int64, error) {
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	op := "drain"
	if first {
		op = "remove"
	}
	keys := []string{tk.groups, tk.messages, tk.refs, gk.due, gk.lease, gk.keyed, gk.paused, tk.history, gk.epoch, gk.removedDue, gk.removedLease, tk.batches, tk.parked, tk.window, tk.removedParked, gk.far, gk.removedFar}
	res, err := s.run(ctx, s.client, removeGroupScript, keys, g.Name, limit, op, gk.wakeChannel)
	if err != nil {
		return false, 0, 0, err
	}
	r, _ := res.([]any)
	if len(r) != 3 {
		return false, 0, 0, unexpected(removeGroupScript, res)
	}
	return asInt(r[0]) == 1, asInt(r[1]), asInt(r[2]), nil
}

// GroupCounts is what Stats counts for one group of one partition. Times are Unix µs on the
// Redis clock.
type GroupCounts struct {
	NowUs                    int64 // the Redis clock when the counts were taken
	Due, Scheduled, InFlight int64
	Dead                     int64 // dead letters waiting on the dead-letter partition
	HeadUs                   int64 // due time of the oldest message due now, -1 if none
	NextDueUs                int64 // the earliest due time after now, -1 if none
	Paused                   bool
	Compact                  int64 // of Scheduled, those in the compact tier (see far.lua)
}

// Stats runs stats.lua for the groups of partition p; dead are the partitions of their
// dead-letter topics, in the same order.
func (s Store) Stats(ctx context.Context, p Partition, groups []string, dead []Partition) ([]GroupCounts, error) {
	keys := make([]string, 0, 5*len(groups))
	for n, g := range groups {
		gk := s.keys.group(p.Of(g))
		keys = append(keys, gk.due, gk.lease, gk.paused, s.keys.topic(dead[n]).parked, gk.far)
	}
	res, err := s.run(ctx, s.client, statsScript, keys)
	if err != nil {
		return nil, err
	}
	r, _ := res.([]any)
	if len(r) != 1+8*len(groups) {
		return nil, fmt.Errorf("script %s: unexpected reply of %d values for %d groups", statsScript.name, len(r), len(groups))
	}
	out := make([]GroupCounts, len(groups))
	for n := range out {
		v := r[1+8*n:]
		out[n] = GroupCounts{NowUs: asInt(r[0]), Due: asInt(v[0]), Scheduled: asInt(v[1]), InFlight: asInt(v[2]), Dead: asInt(v[3]), HeadUs: asInt(v[4]), NextDueUs: asInt(v[5]), Paused: asInt(v[6]) == 1, Compact: asInt(v[7])}
	}
	return out, nil
}

// Clock reads the Redis clock (TIME), in Unix µs. On a cluster, one node answers.
func (s Store) Clock(ctx context.Context) (int64, error) {
	t, err := command(ctx, s, func(ctx context.Context) (time.Time, error) {
		return s.client.Time(ctx).Result()
	})
	if err != nil {
		return 0, err
	}
	return t.UnixMicro(), nil
}

// Purge runs purge.lua once on set, a group's due or lease set: it drops up to limit messages
// of the span for the group (of a due set's Later and All spans, its compact tier's too, after
// moving what is due to move; more reports a bucket still to move, so call again), closing the batches it drops, and returns how many it dropped and
// how many are left. It returns an error wrapping ErrNotFound, having changed nothing, when the
// group is not registered on the topic partition.
func (s Store) Purge(ctx context.Context, set Set, span Span, limit int) (dropped, left int64, more bool, err error) {
	if set.Kind == ParkedSet {
		return 0, 0, false, errors.New("purge: a parked set belongs to no group")
	}
	g := set.Group
	tk, gk := s.keys.topic(g.Partition), s.keys.group(g)
	tier := ""
	if set.Kind == DueSet {
		tier = "far"
	}
	res, err := s.run(ctx, s.client, purgeScript, []string{s.keys.set(set), tk.messages, tk.refs, gk.keyed, tk.history, tk.groups, tk.batches, gk.far}, string(span), limit, g.Name, tier)
	if err != nil {
		return 0, 0, false, err
	}
	if n, ok := res.(int64); ok && n == -1 {
		return 0, 0, false, fmt.Errorf("consumer group %s: %w", Quote(g.Name), ErrNotFound)
	}
	r, _ := res.([]any)
	if len(r) != 3 {
		return 0, 0, false, unexpected(purgeScript, res)
	}
	return asInt(r[0]), asInt(r[1]), asInt(r[2]) == 1, nil
}

// Requeue runs requeue.lua: members of the parked set of the dead-letter partition dead go back
// to group g, due at once, without a key. Each keyed member's history key on the dead-letter
// topic goes in KEYS, so that the script touches no other key. It returns how many were
// requeued; on an error (ErrNotFound wrapped when the group is not registered, or a Redis
// error such as a key of the wrong type) nothing changed.
func (s Store) Requeue(ctx context.Context, g Group, dead Partition, members []string) (int64, error) {
	tk, gk, dk := s.keys.topic(g.Partition), s.keys.group(g), s.keys.topic(dead)
	keys := []string{dk.parked, dk.messages, dk.refs, tk.seq, tk.messages, gk.due, tk.groups}
	args := make([]any, 0, 3+2*len(members))
	args = append(args, g.Name, gk.wakeChannel, dk.history)
	for _, m := range members {
		at := 0
		if key, ok := historyKeyOf(m); ok {
			keys = append(keys, dk.history+key)
			at = len(keys)
		}
		args = append(args, m, at)
	}
	res, err := s.run(ctx, s.client, requeueScript, keys, args...)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	switch {
	case !ok || n < -1:
		return 0, unexpected(requeueScript, res)
	case n == -1:
		return 0, fmt.Errorf("consumer group %s: %w", Quote(g.Name), ErrNotFound)
	}
	return n, nil
}

// NoEviction is the only maxmemory-policy under which Redis never deletes the queue's keys.
const NoEviction = "noeviction"

// MaxmemoryPolicy reads maxmemory-policy (CONFIG GET); on a cluster from every master,
// returning the first that evicts, if any (NoEviction when none does). The error is Redis's
// own, as it is, so that the caller can tell a refused CONFIG (a redis.Error) from a failed
// call.
func (s Store) MaxmemoryPolicy(ctx context.Context) (string, error) {
	return bounded(ctx, s.contextTimeouts, func(ctx context.Context) (string, error) {
		read := func(ctx context.Context, c *redis.Client) (string, error) {
			res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
			if err != nil {
				return "", err
			}
			return res["maxmemory-policy"], nil
		}
		switch c := s.client.(type) {
		case *redis.ClusterClient:
			var mu sync.Mutex
			worst := NoEviction
			err := c.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
				p, err := read(ctx, master)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && p != NoEviction {
					worst = p
				}
				return err
			})
			return worst, err
		case *redis.Client:
			return read(ctx, c)
		}
		res, err := s.client.ConfigGet(ctx, "maxmemory-policy").Result()
		return res["maxmemory-policy"], err
	})
}
