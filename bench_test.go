package redisdelay_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// Hot-path benchmarks against a dedicated redis-server, for benchstat comparisons:
//
//	go test -run '^$' -bench . -count 6 > new.txt && benchstat old.txt new.txt
//
// The side-by-side comparison with other transports is the program in benchmarks/.

func benchBackend(b *testing.B) (backend, *redis.Client) {
	srv := redistest.Start(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	b.Cleanup(func() { _ = c.Close() })
	return backend{name: "redis", client: c}, c
}

func BenchmarkPublish(b *testing.B) {
	be, _ := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	payload := make([]byte, 100)
	b.ReportAllocs()
	b.SetParallelism(8) // 8 goroutines per GOMAXPROCS
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := pub.Publish("bench", message.NewMessage(watermill.NewUUID(), payload)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPublishBatch100(b *testing.B) {
	be, _ := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	payload := make([]byte, 100)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 100 {
		msgs := make([]*message.Message, 100)
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), payload)
		}
		require.NoError(b, pub.Publish("bench", msgs...))
	}
}

// BenchmarkClaimAck measures consuming and acking messages already published.
func BenchmarkClaimAck(b *testing.B) {
	be, _ := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
	require.NoError(b, err)
	defer sub.Close()
	require.NoError(b, sub.SubscribeInitialize("bench"))
	payload := make([]byte, 100)
	for i := 0; i < b.N; i += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for j := i; j < min(i+1000, b.N); j++ {
			msgs = append(msgs, message.NewMessage(strconv.Itoa(j), payload))
		}
		require.NoError(b, pub.Publish("bench", msgs...))
	}
	ch, err := sub.Subscribe(context.Background(), "bench")
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		(<-ch).Ack()
	}
}

// BenchmarkSubscriber is Watermill's subscriber benchmark: b.N messages, all with UUID "1".
func BenchmarkSubscriber(b *testing.B) {
	be, _ := benchBackend(b)
	tests.BenchSubscriber(b, func(n int) (message.Publisher, message.Subscriber) {
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
		require.NoError(b, err)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client, ConsumerGroup: "bench-" + watermill.NewShortUUID()}, nil)
		require.NoError(b, err)
		return pub, sub
	})
}
