package redisdelay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// The cost of message keys, against a dedicated redis-server:
//
//	go test -run '^$' -bench 'Key' -benchtime 100000x
//
// With 100000x, BenchmarkCancelByKey cancels 100k scheduled messages one by one and
// BenchmarkRedisMemoryPerScheduledMessage measures Redis memory over 100k messages.

// BenchmarkPublishKeys compares single-message publishing with and without a key, from 16
// goroutines, to a topic with one consumer group, with the script time per message (redis-µs/msg).
func BenchmarkPublishKeys(b *testing.B) {
	for _, withKey := range []bool{false, true} {
		b.Run(map[bool]string{false: "without-key", true: "with-key"}[withKey], func(b *testing.B) {
			be, c := benchBackend(b)
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
			require.NoError(b, err)
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
			require.NoError(b, err)
			b.Cleanup(func() { _ = sub.Close() })
			require.NoError(b, sub.SubscribeInitialize("bench"))
			payload := make([]byte, 100)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			before := scriptCPU(b, c)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					msg := message.NewMessage(watermill.NewUUID(), payload)
					delay.Message(msg, delay.For(time.Hour))
					if withKey {
						redisdelay.WithKey(msg, "order-"+strconv.FormatInt(n.Add(1), 10))
					}
					if err := pub.Publish("bench", msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportScriptCPU(b, c, before, b.N)
		})
	}
}

// BenchmarkRedisMemoryPerScheduledMessage reports the Redis memory (INFO memory used_memory)
// per scheduled message with a 100-byte payload, for one and for two consumer groups, with and
// without a key of 16 bytes ("order-" and 10 digits).
func BenchmarkRedisMemoryPerScheduledMessage(b *testing.B) {
	for _, tc := range []struct {
		groups  int
		withKey bool
	}{{1, false}, {1, true}, {2, false}, {2, true}} {
		name := strconv.Itoa(tc.groups) + "-group/" + map[bool]string{false: "without-key", true: "with-key-16B"}[tc.withKey]
		withKey := tc.withKey
		b.Run(name, func(b *testing.B) {
			be, client := benchBackend(b)
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
			require.NoError(b, err)
			for g := range tc.groups {
				sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client, ConsumerGroup: "g" + strconv.Itoa(g)}, nil)
				require.NoError(b, err)
				b.Cleanup(func() { _ = sub.Close() })
				require.NoError(b, sub.SubscribeInitialize("bench"))
			}
			payload := make([]byte, 100)
			before := usedMemory(b, client)
			b.ResetTimer()
			for i := 0; i < b.N; i += 100 {
				msgs := make([]*message.Message, 0, 100)
				for j := i; j < min(i+100, b.N); j++ {
					msg := message.NewMessage(watermill.NewUUID(), payload)
					delay.Message(msg, delay.For(time.Hour))
					if withKey {
						redisdelay.WithKey(msg, fmt.Sprintf("order-%010d", j))
					}
					msgs = append(msgs, msg)
				}
				require.NoError(b, pub.Publish("bench", msgs...))
			}
			b.StopTimer()
			// Publish call tokens expire after a while and are not part of a message's cost.
			deleteCallTokens(b, client)
			b.ReportMetric(float64(usedMemory(b, client)-before)/float64(b.N), "redis-B/msg")
		})
	}
}

// BenchmarkCancelByKey cancels scheduled messages one by one, by key, from 16 goroutines.
func BenchmarkCancelByKey(b *testing.B) {
	be, _ := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Close() })
	require.NoError(b, sub.SubscribeInitialize("bench"))
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: be.client}, nil)
	require.NoError(b, err)
	for i := 0; i < b.N; i += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for j := i; j < min(i+1000, b.N); j++ {
			msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), nil), "order-"+strconv.Itoa(j))
			delay.Message(msg, delay.For(time.Hour))
			msgs = append(msgs, msg)
		}
		require.NoError(b, pub.Publish("bench", msgs...))
	}
	var next, done atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := in.Cancel(context.Background(), "bench", redisdelay.ByKey("order-"+strconv.FormatInt(next.Add(1)-1, 10)))
			if err != nil {
				b.Error(err)
				return
			}
			if res.Groups[redisdelay.DefaultConsumerGroup] == redisdelay.OutcomeApplied {
				done.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cancels/s")
	require.Equal(b, int64(b.N), done.Load(), "every cancel must remove its message")
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.InfoMap(context.Background(), "memory").Result()
	require.NoError(b, err)
	v, err := strconv.ParseInt(strings.TrimSpace(info["Memory"]["used_memory"]), 10, 64)
	require.NoError(b, err)
	return v
}

func deleteCallTokens(b *testing.B, c *redis.Client) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, "*:call:*", 1000).Iterator()
	for iter.Next(ctx) {
		require.NoError(b, c.Del(ctx, iter.Val()).Err())
	}
	require.NoError(b, iter.Err())
}
