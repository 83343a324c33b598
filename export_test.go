package redisdelay

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// ClaimAheadForTest is how long before its due time a subscription may claim and hold a
// message without a key (see claimAhead).
const ClaimAheadForTest = claimAhead

// SetClaimAheadForTest makes the subscriptions that sub starts from now on claim messages
// without a key up to d before their due time instead of claimAhead.
func SetClaimAheadForTest(sub *Subscriber, d time.Duration) { sub.claimAhead = d }

// keysForTest returns the keys of group on the topic partition that a test names by its name
// in the key space (see PartitionNameForTest): partition 0 of a topic of that name has the
// same keys.
func keysForTest(prefix, name, group string) store.KeyNames {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return store.KeyNamesForTest(prefix, store.Partition{Topic: name}, group)
}

// GroupKeysForTest returns the due and lease sorted-set keys of a consumer group, so that tests
// can check what Redis holds.
func GroupKeysForTest(prefix, topic, group string) (due, lease string) {
	k := keysForTest(prefix, topic, group)
	return k.Due, k.Lease
}

// MessagesKeyForTest returns the key of the hash that stores a topic's messages.
func MessagesKeyForTest(prefix, topic string) string {
	return keysForTest(prefix, topic, "").Messages
}

// DebounceKeyForTest returns the Redis key that holds the debounce cap of key on a topic of
// that many partitions.
func DebounceKeyForTest(prefix, topic string, partitions int, key string) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	p := store.Partition{Topic: topic, N: keyPartition(key, partitions)}
	return store.KeyNamesForTest(prefix, p, "").Debounce + key
}

func messageWithUUID(uuid string) *message.Message { return message.NewMessage(uuid, nil) }

// PartitionNameForTest names partition n of a topic in the key space.
func PartitionNameForTest(topic string, n int) string {
	return store.PartitionNameForTest(store.Partition{Topic: topic, N: n})
}

// ScheduledForTest counts the messages of a topic that Redis holds anywhere a publish can put
// them: the messages hash, the set parked for a first group, and the due sets of the groups.
func ScheduledForTest(ctx context.Context, client redis.UniversalClient, topic string, groups ...string) int64 {
	k := keysForTest("", topic, "")
	n := client.HLen(ctx, k.Messages).Val() + client.ZCard(ctx, k.Parked).Val()
	for _, g := range groups {
		n += client.ZCard(ctx, keysForTest("", topic, g).Due).Val()
	}
	return n
}

// GroupLifecycleKeysForTest returns the keys of a consumer group that its registration and
// its removal create: its epoch and the removal's due and lease sets, and the topic's parked
// set as the removal of its last group takes it.
func GroupLifecycleKeysForTest(prefix, topic, group string) []string {
	k := keysForTest(prefix, topic, group)
	return []string{k.Epoch, k.RemovedDue, k.RemovedLease, k.RemovedParked}
}

// RequeueUncheckedForTest runs Inspector.Requeue on a topic of one partition without its check
// in Go that the group is registered: as when RemoveGroup runs between that check and the
// script, which then has to refuse the group itself.
func RequeueUncheckedForTest(ctx context.Context, in *Inspector, topic, group string, refs ...string) (int64, error) {
	return in.requeue(ctx, TopicInfo{Topic: topic, Partitions: 1}, group, refs)
}

// PurgeUncheckedForTest runs Inspector.Purge on a topic of one partition without its check in
// Go that the group is registered (see RequeueUncheckedForTest).
func PurgeUncheckedForTest(ctx context.Context, in *Inspector, topic, group string, state State) (int64, error) {
	return in.purge(ctx, TopicInfo{Topic: topic, Partitions: 1}, group, state)
}

// WindowKeysForTest returns the keys of a topic's parked set and new-group window flag.
func WindowKeysForTest(prefix, topic string) (parked, window string) {
	k := keysForTest(prefix, topic, "")
	return k.Parked, k.Window
}

// RegistryKeysForTest returns the key of the topic registry and of a topic's group set, so that
// tests can set up what an older version may have stored.
func RegistryKeysForTest(prefix, topic string) (registry, groups string) {
	k := keysForTest(prefix, topic, "")
	return k.Registry, k.Groups
}

// ExpiredAtClaimForTest is the deadline decision of a claimed message with metadata md (see
// expiredAtClaim), read as a consumer reads it (receivedOptions).
func ExpiredAtClaimForTest(md message.Metadata, attempt, dueUs, claimedUs int64) (deadlineUs int64, expired bool, err error) {
	return expiredAtClaim(receivedOptions(&message.Message{Metadata: md}, "", false), attempt, dueUs, claimedUs)
}

// The tests watch compact-tier buckets move in real time, with horizons of milliseconds.
func init() { compactHorizonFloor = 10 * time.Millisecond }
