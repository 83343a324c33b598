package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
)

// The wmbench scenario follows the method of Watermill's own benchmark
// (github.com/ThreeDotsLabs/watermill-benchmark): for each message size, a fresh topic whose
// consumer group is created first by subscribing once and closing; then N messages published by
// 64 goroutines, each taking messages from an unbuffered channel and publishing them one per
// Publish call (ULID message IDs, one random payload of the size); then a Watermill Router with
// one NoPublisherHandler that acks and counts, the rate taken from just before the router is
// created to the last message. Clients and Pub/Subs use their defaults, as that benchmark does;
// redisstream's consumer group is the one that benchmark names.

var wmCount = flag.Int("wm-count", 200_000, "messages per size in the wmbench scenario (-quick: 5000)")

var wmSizes = []int{16, 64, 256}

const (
	wmWorkers       = 64
	wmStreamGroup   = "test_consumer_group" // watermill-benchmark's redisstream consumer group
	wmHandlerName   = "benchmark_read"
	wmPublishCap    = 40 * time.Second
	wmSubscribeCap  = 60 * time.Second
	wmQuickPubCap   = 5 * time.Second
	wmQuickSubCap   = 10 * time.Second
	wmQuickMaxCount = 5_000
)

// isQuickRun reports whether -quick was given.
func isQuickRun() bool {
	f := flag.Lookup("quick")
	return f != nil && f.Value.String() == "true"
}

func (b *bench) runWMBench(sys system) error {
	ws, ok := sys.(*wmSystem)
	if !ok {
		return nil // asynq is not a Watermill Pub/Sub
	}
	n, pubCap, subCap := *wmCount, wmPublishCap, wmSubscribeCap
	if isQuickRun() {
		n, pubCap, subCap = min(n, wmQuickMaxCount), wmQuickPubCap, wmQuickSubCap
	}
	for _, size := range wmSizes {
		if err := b.wmBenchSize(ws, size, n, pubCap, subCap); err != nil {
			return fmt.Errorf("%d B: %w", size, err)
		}
	}
	return nil
}

// wmPubSub builds a publisher or subscriber as watermill-benchmark does: its own client with
// default options, default config.
func (b *bench) wmSubscriber(ws *wmSystem) (message.Subscriber, *redis.Client, error) {
	client := redis.NewClient(&redis.Options{Addr: b.addr})
	var (
		sub message.Subscriber
		err error
	)
	switch ws.kind {
	case sysRedisDelay:
		// Defaults, consumer group included (-claim-batch still applies).
		sub, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ClaimBatchSize: ws.claimBatch}, watermill.NopLogger{})
	default:
		sub, err = redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:        client,
			Unmarshaller:  redisstream.DefaultMarshallerUnmarshaller{},
			ConsumerGroup: wmStreamGroup,
		}, watermill.NopLogger{})
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return sub, client, nil
}

func (b *bench) wmPublisher(ws *wmSystem) (message.Publisher, *redis.Client, error) {
	client := redis.NewClient(&redis.Options{Addr: b.addr})
	var (
		pub message.Publisher
		err error
	)
	switch ws.kind {
	case sysRedisDelay:
		pub, err = redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, watermill.NopLogger{})
	default:
		pub, err = redisstream.NewPublisher(redisstream.PublisherConfig{
			Client:     client,
			Marshaller: redisstream.DefaultMarshallerUnmarshaller{},
		}, watermill.NopLogger{})
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return pub, client, nil
}

func (b *bench) wmBenchSize(ws *wmSystem, size, n int, pubCap, subCap time.Duration) error {
	if err := b.reset(); err != nil {
		return err
	}
	topic := b.topic(fmt.Sprintf("wmbench-%d-%s", size, watermill.NewShortUUID()))

	// Initialise: subscribe once and close, which creates the consumer group.
	sub, client, err := b.wmSubscriber(ws)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = sub.Subscribe(ctx, topic)
	cancel()
	_ = sub.Close()
	_ = client.Close()
	if err != nil {
		return fmt.Errorf("initialise: %w", err)
	}
	// Let the server drop the closed subscription's connection (redisstream's first read blocks
	// without a timeout) before anything is published.
	time.Sleep(200 * time.Millisecond)

	// Publish.
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(rand.IntN(256))
	}
	pub, pubClient, err := b.wmPublisher(ws)
	if err != nil {
		return err
	}
	pool := pubClient.Options().PoolSize
	w := b.watch()
	published, pubTook, err := wmPublish(pub, topic, payload, n, pubCap)
	_ = pub.Close()
	_ = pubClient.Close()
	if err != nil {
		return err
	}
	if published == 0 {
		return fmt.Errorf("nothing published within %s", pubCap)
	}
	w(fmt.Sprintf("%s wmbench publish %d B", ws.kind, size))
	pubRate := float64(published) / pubTook.Seconds()
	note := fmt.Sprintf("%d messages, %d goroutines, default client options (pool %d)", n, wmWorkers, pool)
	if published < n {
		note = joinNote(note, fmt.Sprintf("time-capped: %d of %d in %s", published, n, pubTook.Round(time.Millisecond)))
	}
	b.res.set(fmt.Sprintf("wm_publish_%d", size), ws.kind, pubRate, note)

	// Subscribe with a router.
	w = b.watch()
	got, subTook, complete, err := b.wmSubscribe(ws, topic, published, subCap)
	if err != nil {
		return err
	}
	w(fmt.Sprintf("%s wmbench subscribe %d B", ws.kind, size))
	subRate := float64(got) / subTook.Seconds()
	note = fmt.Sprintf("Router, 1 NoPublisherHandler, %d messages", published)
	if ws.kind == sysRedisStream {
		note += ", consumer group " + wmStreamGroup
	}
	if !complete {
		note = joinNote(note, fmt.Sprintf("time-capped: %d of %d in %s", got, published, subTook.Round(time.Millisecond)))
	}
	b.res.set(fmt.Sprintf("wm_subscribe_%d", size), ws.kind, subRate, note)
	progress("  %s: %d B: publish %.0f msg/s, subscribe %.0f msg/s", ws.kind, size, pubRate, subRate)
	return nil
}

// wmPublish publishes n messages from wmWorkers goroutines fed through an unbuffered channel,
// one message per Publish, until all are published or capDur passes.
func wmPublish(pub message.Publisher, topic string, payload []byte, n int, capDur time.Duration) (int, time.Duration, error) {
	var (
		wg       sync.WaitGroup
		done     atomic.Int64
		errOnce  sync.Once
		firstErr error
		failed   = make(chan struct{})
	)
	msgs := make(chan *message.Message)
	for range wmWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range msgs {
				if err := pub.Publish(topic, msg); err != nil {
					errOnce.Do(func() { firstErr = err; close(failed) })
					continue
				}
				done.Add(1)
			}
		}()
	}
	start := time.Now()
	deadline := time.NewTimer(capDur)
	defer deadline.Stop()
feed:
	for range n {
		msg := message.NewMessage(watermill.NewULID(), payload)
		select {
		case msgs <- msg:
		case <-deadline.C:
			break feed
		case <-failed:
			break feed
		}
	}
	close(msgs)
	wg.Wait()
	return int(done.Load()), time.Since(start), firstErr
}

// wmSubscribe consumes n messages of topic with a Router and one NoPublisherHandler. It returns
// the count, the time from just before the router was created to the last message (or the
// cap), and whether all arrived.
func (b *bench) wmSubscribe(ws *wmSystem, topic string, n int, capDur time.Duration) (int, time.Duration, bool, error) {
	sub, client, err := b.wmSubscriber(ws)
	if err != nil {
		return 0, 0, false, err
	}
	defer client.Close()
	cnt := newCounter(n)
	start := time.Now()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		_ = sub.Close()
		return 0, 0, false, err
	}
	router.AddNoPublisherHandler(wmHandlerName, topic, sub, func(msg *message.Message) error {
		defer cnt.add()
		msg.Ack()
		return nil
	})
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	got, end, complete := cnt.wait(start.Add(capDur))
	if err := router.Close(); err != nil { // closes the subscriber too
		progress("  %s: router close: %v", ws.kind, err)
	}
	if err := <-runErr; err != nil {
		return 0, 0, false, fmt.Errorf("router: %w", err)
	}
	return got, end.Sub(start), complete, nil
}
