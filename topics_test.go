package redisdelay_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestTopicsListsEveryTopicWithItsGroups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "t" + watermill.NewShortUUID() + ":"
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, KeyPrefix: prefix}, errorLogger{})
		require.NoError(t, err)
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		require.NoError(t, pub.Publish("orders", message.NewMessage("1", nil)))
		for _, g := range []string{"billing", "shipping"} {
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, KeyPrefix: prefix, ConsumerGroup: g, Partitions: 2}, errorLogger{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Close() })
			require.NoError(t, sub.SubscribeInitialize("payments"))
		}
		topics, err := in.Topics(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []redisdelay.TopicInfo{
			{Topic: "orders", Partitions: 1, Groups: []string{}},
			{Topic: "payments", Partitions: 2, Groups: []string{"billing", "shipping"}},
			{Topic: "payments.dead-letter.billing", Partitions: 2, Groups: []string{}},
			{Topic: "payments.dead-letter.shipping", Partitions: 2, Groups: []string{}},
		}, topics)

		_, err = in.Stats(context.Background(), "unknown")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		assert.ErrorContains(t, err, "unknown")
		assert.ErrorIs(t, in.Pause(context.Background(), "payments", "nobody"), redisdelay.ErrNotFound)
	})
}
