package redisdelay_test

import (
	"context"

	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// TestOneLayoutMakesEveryComponentOfAQueue gives the client, key prefix and marshaler once and
// checks that every component made from the layout reads and writes the same queue, and
// reports the layout back.
func TestOneLayoutMakesEveryComponentOfAQueue(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	layout := redisdelay.Layout{Client: rdb, KeyPrefix: "shop:"}

	pub, err := redisdelay.NewPublisher(layout.PublisherConfig(), watermill.NopLogger{})
	require.NoError(t, err)
	sub, err := redisdelay.NewSubscriber(layout.SubscriberConfig("billing"), watermill.NopLogger{})
	require.NoError(t, err)
	in, err := redisdelay.NewInspector(layout.InspectorConfig(), watermill.NopLogger{})
	require.NoError(t, err)

	want := redisdelay.Layout{Client: rdb, KeyPrefix: "shop:", Marshaler: redisdelay.DefaultMarshalerUnmarshaler{}}
	require.Equal(t, want, pub.Layout())
	require.Equal(t, want, sub.Layout())
	require.Equal(t, want, in.Layout())

	require.NoError(t, sub.SubscribeInitialize("orders"))
	require.NoError(t, pub.Publish("orders", message.NewMessage("order-1", []byte("paid?"))))
	stats, err := in.Stats(context.Background(), "orders")
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.Equal(t, "billing", stats[0].Group)
	require.EqualValues(t, 1, stats[0].Due)
	keys, err := rdb.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		require.Regexp(t, `^shop:`, k)
	}
}
