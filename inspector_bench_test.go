package redisdelay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/metrics"
)

// The cost of operating a queue, against a dedicated redis-server:
//
//	go test -run '^$' -bench 'Stats1000|ListPage|RequeueDeadLetters' -benchtime 10x .
//
// Each reports its Redis CPU (the INFO commandstats usec deltas, all commands) next to the
// wall time.

// BenchmarkStats1000Topics reads the stats of 1000 topics with 2 consumer groups each.
func BenchmarkStats1000Topics(b *testing.B) {
	in, client := seed1000Topics(b)
	before := redisCPU(b, client)
	b.ResetTimer()
	for range b.N {
		stats, err := in.Stats(context.Background())
		require.NoError(b, err)
		require.Len(b, stats, 2000) // dead-letter topics have no groups
	}
	b.StopTimer()
	b.ReportMetric(float64(redisCPU(b, client)-before)/1000/float64(b.N), "redis-cpu-ms/op")
}

// BenchmarkSampler1000Topics runs sampling passes of the metrics' gauges over 1000 topics with
// 2 consumer groups each.
func BenchmarkSampler1000Topics(b *testing.B) {
	in, client := seed1000Topics(b)
	m, err := metrics.New(metrics.Config{Registerer: prometheus.NewRegistry()})
	require.NoError(b, err)
	before := redisCPU(b, client)
	b.ResetTimer()
	for range b.N {
		require.NoError(b, m.Sample(context.Background(), in))
	}
	b.StopTimer()
	b.ReportMetric(float64(redisCPU(b, client)-before)/1000/float64(b.N), "redis-cpu-ms/op")
}

// seed1000Topics registers 2 consumer groups on each of 1000 topics, publishes a message to
// each, and returns an Inspector.
func seed1000Topics(b *testing.B) (*redisdelay.Inspector, *redis.Client) {
	be, client := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	for _, g := range []string{"billing", "shipping"} {
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client, ConsumerGroup: g}, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = sub.Close() })
		for n := range 1000 {
			require.NoError(b, sub.SubscribeInitialize("topic-"+strconv.Itoa(n)))
		}
	}
	for n := range 1000 {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		delay.Message(msg, delay.For(time.Hour))
		require.NoError(b, pub.Publish("topic-"+strconv.Itoa(n), msg))
	}
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: be.client, OperationTimeout: time.Minute}, nil)
	require.NoError(b, err)
	return in, client
}

// BenchmarkListPageWith1MScheduled lists pages of 100 messages from a group with a million
// scheduled, each page from a cursor deep in the set.
func BenchmarkListPageWith1MScheduled(b *testing.B) {
	be, client := benchBackend(b)
	ctx := context.Background()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client, OperationTimeout: time.Minute}, nil)
	require.NoError(b, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Close() })
	require.NoError(b, sub.SubscribeInitialize("bench"))
	payload := make([]byte, 100)
	for i := 0; i < 1_000_000; i += 1000 {
		msgs := make([]*message.Message, 1000)
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), payload)
			delay.Message(msgs[j], delay.For(time.Hour+time.Duration(i+j)*time.Millisecond))
		}
		require.NoError(b, pub.Publish("bench", msgs...))
	}
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: be.client}, nil)
	require.NoError(b, err)
	opts := redisdelay.ListOptions{State: redisdelay.StateScheduled, Limit: 100}
	before := redisCPU(b, client)
	b.ResetTimer()
	for range b.N {
		page, err := in.List(ctx, "bench", redisdelay.DefaultConsumerGroup, opts)
		require.NoError(b, err)
		require.Len(b, page.Messages, 100)
		// Jump ahead 50 pages' worth between measured pages, so pages come from all over.
		opts.Cursor = page.NextCursor
	}
	b.StopTimer()
	b.ReportMetric(float64(redisCPU(b, client)-before)/1000/float64(b.N), "redis-cpu-ms/op")
}

// BenchmarkRequeueDeadLetters requeues 100k dead letters (waiting on the group's dead-letter
// topic) back to their group, all at once.
func BenchmarkRequeueDeadLetters(b *testing.B) {
	be, client := benchBackend(b)
	ctx := context.Background()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client, OperationTimeout: time.Minute}, nil)
	require.NoError(b, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Close() })
	require.NoError(b, sub.SubscribeInitialize("bench"))
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: be.client, OperationTimeout: time.Minute}, nil)
	require.NoError(b, err)
	dead := redisdelay.DefaultDeadLetterTopic("bench", redisdelay.DefaultConsumerGroup)
	payload := make([]byte, 100)
	const n = 100_000
	var cpu, moved int64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := 0; i < n; i += 1000 {
			msgs := make([]*message.Message, 1000)
			for j := range msgs {
				msgs[j] = message.NewMessage(watermill.NewUUID(), payload)
			}
			require.NoError(b, pub.Publish(dead, msgs...))
		}
		before := redisCPU(b, client)
		b.StartTimer()
		start := time.Now()
		m, err := in.Requeue(ctx, "bench", redisdelay.DefaultConsumerGroup)
		took += time.Since(start)
		require.NoError(b, err)
		b.StopTimer()
		moved += m
		cpu += redisCPU(b, client) - before
		require.Equal(b, int64(n), m)
		require.NoError(b, client.FlushAll(ctx).Err())
		require.NoError(b, sub.SubscribeInitialize("bench"))
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(moved)/took.Seconds(), "requeued/s")
	b.ReportMetric(float64(cpu)/1000/float64(b.N), "redis-cpu-ms/op")
}

// redisCPU returns the total usec of every command in INFO commandstats.
func redisCPU(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "usec=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(b, err)
		total += n
	}
	return total
}
