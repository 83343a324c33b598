package redisdelay

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// GroupKeysForTest returns the due and lease sorted-set keys of a consumer group, so that tests
// can check what Redis holds.
func GroupKeysForTest(prefix, topic, group string) (due, lease string) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	g := keySpace{prefix: prefix}.group(topic, group)
	return g.due, g.lease
}

// MessagesKeyForTest returns the key of the hash that stores a topic's messages.
func MessagesKeyForTest(prefix, topic string) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return keySpace{prefix: prefix}.topic(topic).messages
}

func messageWithUUID(uuid string) *message.Message { return message.NewMessage(uuid, nil) }

// PartitionNameForTest names partition n of a topic in the key space.
func PartitionNameForTest(topic string, n int) string { return partitionName(topic, n) }

// ScheduledForTest counts the messages of a topic that Redis holds anywhere a publish can put
// them: the messages hash, the set parked for a first group, and the due sets of the groups.
func ScheduledForTest(ctx context.Context, client redis.UniversalClient, topic string, groups ...string) int64 {
	k := keySpace{prefix: DefaultKeyPrefix}
	tk := k.topic(topic)
	n := client.HLen(ctx, tk.messages).Val() + client.ZCard(ctx, tk.parked).Val()
	for _, g := range groups {
		n += client.ZCard(ctx, k.group(topic, g).due).Val()
	}
	return n
}

// GroupLifecycleKeysForTest returns the keys of a consumer group that its registration and
// its removal create: its epoch and the removal's due and lease sets, and the topic's parked
// set as the removal of its last group takes it.
func GroupLifecycleKeysForTest(prefix, topic, group string) []string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	g := keySpace{prefix: prefix}.group(topic, group)
	return []string{g.epoch, g.removedDue, g.removedLease, keySpace{prefix: prefix}.topic(topic).removedParked}
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
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	tk := keySpace{prefix: prefix}.topic(topic)
	return tk.parked, tk.window
}

// RegistryKeysForTest returns the key of the topic registry and of a topic's group set, so that
// tests can set up what an older version may have stored.
func RegistryKeysForTest(prefix, topic string) (registry, groups string) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	k := keySpace{prefix: prefix}
	return k.topicRegistry(), k.topic(topic).groups
}
