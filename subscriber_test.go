package redisdelay

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// TestPublishWakeUpReachesTheSubscribersHubWithTheDueTime checks that the scripts and the
// Subscriber's wake hub agree on the wake channel of a group and on the kind of Pub/Sub: a
// watcher of the channel that the subscriptions watch learns the due time of a message
// published to a group with nothing due, over sharded Pub/Sub on Redis 7 and over classic
// Pub/Sub where Redis refuses SPUBLISH (miniredis).
func TestPublishWakeUpReachesTheSubscribersHubWithTheDueTime(t *testing.T) {
	forStoreBackends(t, func(t *testing.T, client *redis.Client) {
		sub, err := NewSubscriber(SubscriberConfig{Client: client}, nil)
		require.NoError(t, err)
		defer func() { _ = sub.Close() }()
		ctx := context.Background()
		const topic = "wake"
		part := store.Partition{Topic: topic}
		watch := sub.wakeHub.Watch(sub.store.WakeChannel(part.Of(DefaultConsumerGroup)))
		select {
		case <-watch.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("the wake channel was not confirmed within 5s")
		}
		<-watch.Due() // the confirmation's "check now"

		_, _, err = sub.store.RegisterGroup(ctx, part.Of(DefaultConsumerGroup), 0, 0)
		require.NoError(t, err)
		data, err := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID("wake"))
		require.NoError(t, err)
		published := time.Now()
		_, err = sub.store.Publish(ctx, part, store.Call{Token: store.NewToken(), TTL: time.Minute}, []string{DefaultConsumerGroup}, []store.Outgoing{{Data: data, Delay: time.Minute}})
		require.NoError(t, err)
		select {
		case due := <-watch.Due():
			// Redis runs on this machine, so its clock is ours.
			assert.WithinDuration(t, published.Add(time.Minute), time.UnixMicro(due), 5*time.Second, "the wake-up carries the message's due time")
		case <-time.After(5 * time.Second):
			t.Fatal("no wake-up within 5s")
		}
	})
}

// forStoreBackends runs f as a subtest against miniredis and a throwaway redis-server.
func forStoreBackends(t *testing.T, f func(t *testing.T, client *redis.Client)) {
	mr := miniredis.RunT(t)
	for name, addr := range map[string]string{"miniredis": mr.Addr(), "redis": redistest.Start(t, redistest.Options{}).Addr} {
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: addr})
			defer client.Close()
			f(t, client)
		})
	}
}
