package redisdelay_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
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

// scriptStats is the Redis time (INFO commandstats usec) and call count of the script commands
// (EVAL, EVALSHA and their _RO forms) so far, and the count of every other command but INFO
// (cmds): those the scripts run, which Redis 7 counts under their own names, with their time
// inside the script's already.
type scriptStats struct{ usec, calls, cmds int64 }

func scriptCPU(b testing.TB, c *redis.Client) scriptStats {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err)
	var s scriptStats
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		script := strings.HasPrefix(name, "cmdstat_eval")
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case script && k == "usec":
				s.usec += n
			case script && k == "calls":
				s.calls += n
			case !script && k == "calls":
				s.cmds += n
			}
		}
	}
	return s
}

// reportScriptCPU reports the script time per message (redis-µs/msg), messages per script call
// (msgs/call) and the other commands per message (cmds/msg: those the scripts run, and any a
// subscriber sends) since before, for n messages.
func reportScriptCPU(b *testing.B, c *redis.Client, before scriptStats, n int) {
	after := scriptCPU(b, c)
	if n == 0 || after.calls == before.calls {
		return
	}
	b.ReportMetric(float64(after.usec-before.usec)/float64(n), "redis-µs/msg")
	b.ReportMetric(float64(n)/float64(after.calls-before.calls), "msgs/call")
	b.ReportMetric(float64(after.cmds-before.cmds)/float64(n), "cmds/msg")
}

// BenchmarkPublish publishes one message per call from 16 goroutines (8 per GOMAXPROCS on this
// project's 2-core machine), so that group commit shares script calls between them.
func BenchmarkPublish(b *testing.B) {
	benchmarkPublish(b, 8)
}

// BenchmarkPublish64 is BenchmarkPublish with 64 goroutines on 2 cores, as Watermill's
// benchmark publishes.
func BenchmarkPublish64(b *testing.B) {
	benchmarkPublish(b, 32)
}

// BenchmarkPublishAlone publishes one message per call from one goroutine: every call is a
// round of its own, so this measures what a round costs the client (allocations per round,
// not shared between callers), as a lone or slow publisher pays it.
func BenchmarkPublishAlone(b *testing.B) {
	benchmarkPublish(b, 0)
}

// benchmarkPublish publishes one message of 100 bytes per call from perProc goroutines per
// GOMAXPROCS, or from the benchmark's own goroutine alone when perProc is 0.
func benchmarkPublish(b *testing.B, perProc int) {
	be, c := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	payload := make([]byte, 100)
	publish := func() error { return pub.Publish("bench", message.NewMessage(watermill.NewUUID(), payload)) }
	before, cpu := scriptCPU(b, c), processCPU()
	b.ReportAllocs()
	if perProc == 0 {
		for range b.N {
			if err := publish(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(perProc)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := publish(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "client-µs/msg")
	reportScriptCPU(b, c, before, b.N)
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkPublishBatch100(b *testing.B) {
	be, c := benchBackend(b)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client}, nil)
	require.NoError(b, err)
	payload := make([]byte, 100)
	before := scriptCPU(b, c)
	b.ReportAllocs()
	n := 0
	for ; n < b.N; n += 100 {
		msgs := make([]*message.Message, 100)
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), payload)
		}
		require.NoError(b, pub.Publish("bench", msgs...))
	}
	b.StopTimer()
	reportScriptCPU(b, c, before, n)
}

// BenchmarkClaimAck measures consuming and acking messages already published.
func BenchmarkClaimAck(b *testing.B) {
	be, c := benchBackend(b)
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
	before := scriptCPU(b, c)
	ch, err := sub.Subscribe(context.Background(), "bench")
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		(<-ch).Ack()
	}
	b.StopTimer()
	// The last acks may still be on their way to Redis: close the subscriber, which flushes them.
	require.NoError(b, sub.Close())
	reportScriptCPU(b, c, before, b.N)
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

// BenchmarkPublishBatch100Ahead publishes 100 messages a year ahead per call to a topic with one
// consumer group, into the compact tier (default horizon) and, for comparison, into the due
// set (CompactHorizon -1): Redis time per message and Redis memory per message (INFO memory
// used_memory delta, call tokens deleted; set -benchtime to 100000x or more for a stable figure).
func BenchmarkPublishBatch100Ahead(b *testing.B) {
	for _, tier := range []struct {
		name    string
		horizon time.Duration
	}{{"compact", 0}, {"due-set", -1}} {
		b.Run(tier.name, func(b *testing.B) {
			be, c := benchBackend(b)
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: be.client, CompactHorizon: tier.horizon}, nil)
			require.NoError(b, err)
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: be.client}, nil)
			require.NoError(b, err)
			require.NoError(b, sub.SubscribeInitialize("bench"))
			require.NoError(b, sub.Close())
			payload := make([]byte, 100)
			before, mem := scriptCPU(b, c), usedMemory(b, c)
			n := 0
			for ; n < b.N; n += 100 {
				msgs := make([]*message.Message, 100)
				for j := range msgs {
					msgs[j] = message.NewMessage(watermill.NewUUID(), payload)
					delay.Message(msgs[j], delay.For(365*24*time.Hour))
				}
				require.NoError(b, pub.Publish("bench", msgs...))
			}
			b.StopTimer()
			reportScriptCPU(b, c, before, n)
			deleteCallTokens(b, c)
			b.ReportMetric(float64(usedMemory(b, c)-mem)/float64(n), "redis-B/msg")
		})
	}
}
