package redisdelay_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// The cost and precision of keyed batching, against a dedicated redis-server:
//
//	go test -run '^$' -bench 'BatchAdd|BatchTime|PublishKeys/without' -benchtime 20000x -count 3 .

// BenchmarkBatchAdd publishes single items into batches (100 batch keys, MaxItems 50) from 16
// goroutines; compare with BenchmarkPublishKeys/without-key. It reports the script time per item
// (redis-µs/msg, INFO commandstats), the items per script call (msgs/call) and the commands the
// scripts run per item (cmds/msg).
func BenchmarkBatchAdd(b *testing.B) {
	benchmarkBatchAdd(b, 50, 100)
}

// BenchmarkBatchAddFillingLargeBatches is BenchmarkBatchAdd with MaxItems 1,000 over 10 batch
// keys and 10,000 over 2, so that with -benchtime 20000x each batch fills (and is sealed, O(batch)
// once) 2 times or once: the cost per item must not grow with the batch.
func BenchmarkBatchAddFillingLargeBatches(b *testing.B) {
	for _, tc := range []struct{ maxItems, keys int }{{1000, 10}, {10_000, 2}} {
		b.Run("max-items-"+strconv.Itoa(tc.maxItems), func(b *testing.B) { benchmarkBatchAdd(b, tc.maxItems, tc.keys) })
	}
}

func benchmarkBatchAdd(b *testing.B, maxItems, keys int) {
	be, c := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client,
		Batching: map[string]redisdelay.BatchConfig{"bench": {MaxItems: maxItems, MaxWait: time.Hour}}}, nil)
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
			msg := redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), payload), "area-"+strconv.FormatInt(n.Add(1)%int64(keys), 10))
			if err := pub.Publish("bench", msg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportScriptCPU(b, c, before, b.N)
}

// BenchmarkBatchTimeReleaseLateness releases 500 batches by time (one item each, MaxWait
// 500 ms) and reports the lateness of their delivery: receive time minus due time.
func BenchmarkBatchTimeReleaseLateness(b *testing.B) {
	be, _ := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client,
		Batching: map[string]redisdelay.BatchConfig{"bench": {MaxItems: 100, MaxWait: 500 * time.Millisecond}}}, nil)
	require.NoError(b, err)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(context.Background(), "bench")
	require.NoError(b, err)
	const batches = 500
	var lateness []time.Duration
	early := 0
	b.ResetTimer()
	for range b.N / batches {
		for k := range batches {
			require.NoError(b, pub.Publish("bench", redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), nil), "k"+strconv.Itoa(k))))
		}
		for range batches {
			select {
			case msg := <-ch:
				now := time.Now()
				due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
				require.NoError(b, err)
				if now.Before(due) {
					early++
				}
				lateness = append(lateness, now.Sub(due))
				msg.Ack()
			case <-time.After(10 * time.Second):
				b.Fatal("a batch was not released")
			}
		}
	}
	b.StopTimer()
	if len(lateness) == 0 {
		return
	}
	slices.Sort(lateness)
	q := func(p float64) float64 {
		return float64(lateness[int(p*float64(len(lateness)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(early), "early")
}

// BenchmarkBatchAddToLargeBatch measures the Redis time of adding one item (100 bytes) to a
// batch that holds 1 or 10,000 items already, against a publish without a batch: adding an
// item costs O(item) (see seal_batch), whatever the batch holds.
//
//	go test -run '^$' -bench BatchAddToLargeBatch -benchtime 2000x .
func BenchmarkBatchAddToLargeBatch(b *testing.B) {
	payload := make([]byte, 100)
	for _, held := range []int{-1, 1, 10_000} {
		name := "plain-publish"
		if held >= 0 {
			name = "batch-of-" + strconv.Itoa(held)
		}
		b.Run(name, func(b *testing.B) {
			be, c := benchBackend(b)
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client,
				Batching: map[string]redisdelay.BatchConfig{"bench": {MaxItems: 1 << 30, MaxWait: time.Hour}}}, nil)
			require.NoError(b, err)
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
			require.NoError(b, err)
			b.Cleanup(func() { _ = sub.Close() })
			require.NoError(b, sub.SubscribeInitialize("bench"))
			msg := func() *message.Message {
				m := message.NewMessage(watermill.NewUUID(), payload)
				if held >= 0 {
					redisdelay.WithBatchKey(m, "area")
				}
				return m
			}
			for range max(held, 0) {
				require.NoError(b, pub.Publish("bench", msg()))
			}
			before := scriptCPU(b, c)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, pub.Publish("bench", msg()))
			}
			b.StopTimer()
			after := scriptCPU(b, c)
			b.ReportMetric(float64(after.usec-before.usec)/float64(b.N), "redis-µs/op")
		})
	}
}
