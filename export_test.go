package redisdelay

import "github.com/ThreeDotsLabs/watermill/message"

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
