package redisdelay_test

import (
	"context"
	"testing"
	"time"

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

func TestPartitionsThatDisagreeWithTheTopicRegistryAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		two := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions = 2 })
		require.NoError(t, two.Publish(topic, keyed("k1", time.Hour, "")))

		four := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions = 4 })
		for range 2 { // the second time from the publisher's cache, with the same error
			err := four.Publish(topic, keyed("k2", time.Hour, ""))
			require.Error(t, err)
			assert.ErrorContains(t, err, topic)
			assert.ErrorContains(t, err, "configured with 4 partitions, but the topic registry holds 2")
		}
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = 4 })
		_, err := sub.Subscribe(context.Background(), topic)
		require.Error(t, err)
		assert.ErrorContains(t, err, topic)
		assert.ErrorContains(t, err, "configured with 4 partitions, but the topic registry holds 2")

		// The refused publisher stored nothing: the Inspector, on the registered 2 partitions
		// whatever its own config says, finds only k1.
		in := newInspector(t, b, 4)
		st, err := in.Status(context.Background(), topic, redisdelay.ByKey("k2"))
		require.NoError(t, err)
		assert.False(t, st.Live, "k2 was stored by a refused publish")
		res, err := in.RunNow(context.Background(), topic, redisdelay.ByKey("k1"))
		require.NoError(t, err)
		assert.Equal(t, redisdelay.OutcomeApplied, res.Groups[redisdelay.ParkedGroup], "key k1 found on the registered partitions")

		// Same count: works, and the message arrives.
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = 2 }), topic)
		require.NoError(t, publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions = 2 }).Publish(topic, keyed("k3", 0, "")))
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case m := <-ch:
				got[m.Metadata.Get(redisdelay.KeyMetadataKey)] = true
				m.Ack()
			case <-time.After(10 * time.Second):
				t.Fatalf("received %v, want k1 and k3", got)
			}
		}
		assert.Equal(t, map[string]bool{"k1": true, "k3": true}, got)
	})
}
