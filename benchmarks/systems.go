package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
)

const (
	sysRedisDelay  = "redisdelay"
	sysRedisStream = "redisstream"
	sysAsynq       = "asynq"

	// Metadata keys (and asynq payload header fields) the benchmark uses for its own bookkeeping.
	dueKey = "bench_due_ns" // intended due time, client clock, Unix ns
	seqKey = "bench_seq"    // message number within a scenario

	consumerGroup = "bench"
	poolSize      = 32 // enough for 16 publishing goroutines plus slack
)

// item is one message to publish.
type item struct {
	seq     int
	payload []byte
	// delay: when until is zero, the message is due delay after publishing (0 = at once).
	delay time.Duration
	// until: a due time given as an instant (delay.Until / asynq.ProcessAt).
	until time.Time
	// due is the intended due time recorded in the message, Unix ns of the client clock
	// (0 = not recorded).
	due int64
}

// delivery is what a consumer saw for one message.
type delivery struct {
	at  time.Time // handler start
	seq int
	due int64 // 0 when not recorded
}

// consumerSpec describes consumers to start: instances is the number of Subscriber instances
// (asynq: Servers), each on its own Redis client, each subscribing to every topic; workers is
// asynq's Concurrency per server (the watermill systems run one subscription per topic per
// instance).
type consumerSpec struct {
	topics    []string
	instances int
	workers   int
	handle    func(delivery)
}

type producer interface {
	publish(ctx context.Context, topic string, items []item) error
	close()
}

type system interface {
	name() string
	supportsDelay() bool
	newProducer(addr string) (producer, error)
	// startConsumers starts consuming; stop ends it and waits.
	startConsumers(addr string, spec consumerSpec) (stop func(), err error)
	// consumers returns the spec shape for "n subscribers in one consumer group".
	group(n int) (instances, workers int)
}

func newSystem(name string, claimBatch int) (system, error) {
	switch name {
	case sysRedisDelay:
		return &wmSystem{kind: sysRedisDelay, claimBatch: claimBatch}, nil
	case sysRedisStream:
		return &wmSystem{kind: sysRedisStream}, nil
	case sysAsynq:
		return asynqSystem{}, nil
	}
	return nil, fmt.Errorf("unknown system %q (want %s, %s or %s)", name, sysRedisDelay, sysRedisStream, sysAsynq)
}

// ---- Watermill systems: redisdelay and redisstream ----

type wmSystem struct {
	kind       string
	claimBatch int
}

func (s *wmSystem) name() string           { return s.kind }
func (s *wmSystem) supportsDelay() bool    { return s.kind == sysRedisDelay }
func (s *wmSystem) group(n int) (int, int) { return n, 1 }
func (s *wmSystem) newProducer(addr string) (producer, error) {
	client := newClient(addr, poolSize)
	var (
		pub message.Publisher
		err error
	)
	switch s.kind {
	case sysRedisDelay:
		pub, err = redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, CompactHorizon: *compactHorizon}, watermill.NopLogger{})
	default:
		pub, err = redisstream.NewPublisher(redisstream.PublisherConfig{Client: client}, watermill.NopLogger{})
	}
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &wmProducer{pub: pub, client: client}, nil
}

type wmProducer struct {
	pub    message.Publisher
	client *redis.Client
}

func (p *wmProducer) publish(ctx context.Context, topic string, items []item) error {
	msgs := make([]*message.Message, len(items))
	for i, it := range items {
		msg := message.NewMessage(watermill.NewUUID(), it.payload)
		msg.SetContext(ctx)
		if it.due != 0 { // tracked message (lateness, burst)
			msg.Metadata.Set(dueKey, strconv.FormatInt(it.due, 10))
			msg.Metadata.Set(seqKey, strconv.Itoa(it.seq))
		}
		switch {
		case !it.until.IsZero():
			delay.Message(msg, delay.Until(it.until))
		case it.delay > 0:
			delay.Message(msg, delay.For(it.delay))
		}
		msgs[i] = msg
	}
	return p.pub.Publish(topic, msgs...)
}

func (p *wmProducer) close() {
	_ = p.pub.Close() // redisstream's Close closes the client too
	_ = p.client.Close()
}

func (s *wmSystem) startConsumers(addr string, spec consumerSpec) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		subs    []message.Subscriber
		clients []*redis.Client
		wg      sync.WaitGroup
	)
	stop := func() {
		cancel()
		var cwg sync.WaitGroup
		for _, sub := range subs {
			cwg.Add(1)
			go func() { defer cwg.Done(); _ = sub.Close() }()
		}
		cwg.Wait()
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for range spec.instances {
		// redisstream holds one connection per subscription in a blocking XREADGROUP.
		client := newClient(addr, max(poolSize, len(spec.topics)+16))
		clients = append(clients, client)
		var (
			sub message.Subscriber
			err error
		)
		switch s.kind {
		case sysRedisDelay:
			sub, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
				Client:         client,
				ConsumerGroup:  consumerGroup,
				ClaimBatchSize: s.claimBatch, // 0 = redisdelay.DefaultClaimBatchSize
			}, watermill.NopLogger{})
		default:
			sub, err = redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client:        client,
				ConsumerGroup: consumerGroup,
			}, watermill.NopLogger{})
		}
		if err != nil {
			stop()
			return nil, err
		}
		subs = append(subs, sub)
		for _, topic := range spec.topics {
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				stop()
				return nil, fmt.Errorf("subscribe %s: %w", topic, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for msg := range ch {
					d := delivery{at: time.Now()}
					d.seq, _ = strconv.Atoi(msg.Metadata.Get(seqKey))
					d.due, _ = strconv.ParseInt(msg.Metadata.Get(dueKey), 10, 64)
					spec.handle(d)
					msg.Ack()
				}
			}()
		}
	}
	return stop, nil
}

// initialize registers the consumer group on topic before messages are published to it, as a
// user does for a persistent group (redisdelay: SubscribeInitialize; redisstream: XGROUP CREATE
// MKSTREAM at offset 0, which Subscribe also does, so nothing is needed).
func initialize(sys system, addr, topic string) error {
	ws, ok := sys.(*wmSystem)
	if !ok || ws.kind != sysRedisDelay {
		return nil
	}
	client := newClient(addr, 2)
	defer client.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: consumerGroup}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(topic)
}

// ---- asynq ----

type asynqSystem struct{}

func (asynqSystem) name() string           { return sysAsynq }
func (asynqSystem) supportsDelay() bool    { return true }
func (asynqSystem) group(n int) (int, int) { return 1, n }

const asynqTaskType = "bench"

func (asynqSystem) newProducer(addr string) (producer, error) {
	client := newClient(addr, poolSize)
	return &asynqProducer{client: client, ac: asynq.NewClientFromRedisClient(client)}, nil
}

type asynqProducer struct {
	client *redis.Client
	ac     *asynq.Client
}

// asynq payload: 8 bytes due ns, 8 bytes seq, then the payload.
func (p *asynqProducer) publish(ctx context.Context, topic string, items []item) error {
	// asynq has no batch call: one Enqueue per task.
	for _, it := range items {
		buf := make([]byte, 16+len(it.payload))
		binary.BigEndian.PutUint64(buf, uint64(it.due))
		binary.BigEndian.PutUint64(buf[8:], uint64(it.seq))
		copy(buf[16:], it.payload)
		opts := []asynq.Option{asynq.Queue(topic)}
		switch {
		case !it.until.IsZero():
			opts = append(opts, asynq.ProcessAt(it.until))
		case it.delay > 0:
			opts = append(opts, asynq.ProcessIn(it.delay))
		}
		if _, err := p.ac.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, buf), opts...); err != nil {
			return err
		}
	}
	return nil
}

func (p *asynqProducer) close() { _ = p.client.Close() }

func (asynqSystem) startConsumers(addr string, spec consumerSpec) (func(), error) {
	queues := make(map[string]int, len(spec.topics))
	for _, t := range spec.topics {
		queues[t] = 1
	}
	handler := asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		d := delivery{at: time.Now()}
		p := t.Payload()
		if len(p) >= 16 {
			d.due = int64(binary.BigEndian.Uint64(p))
			d.seq = int(binary.BigEndian.Uint64(p[8:]))
		}
		spec.handle(d)
		return nil
	})
	var (
		servers []*asynq.Server
		clients []*redis.Client
	)
	stop := func() {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Add(1)
			go func() { defer wg.Done(); srv.Shutdown() }()
		}
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for range spec.instances {
		client := newClient(addr, max(poolSize, 2*spec.workers+16))
		clients = append(clients, client)
		srv := asynq.NewServerFromRedisClient(client, asynq.Config{
			Concurrency:     spec.workers,
			Queues:          queues,
			Logger:          nopAsynqLogger{},
			LogLevel:        asynq.FatalLevel,
			ShutdownTimeout: 2 * time.Second,
		})
		if err := srv.Start(handler); err != nil {
			stop()
			return nil, err
		}
		servers = append(servers, srv)
	}
	return stop, nil
}

type nopAsynqLogger struct{}

func (nopAsynqLogger) Debug(...any) {}
func (nopAsynqLogger) Info(...any)  {}
func (nopAsynqLogger) Warn(...any)  {}
func (nopAsynqLogger) Error(...any) {}
func (nopAsynqLogger) Fatal(args ...any) {
	panic(errors.New(fmt.Sprint(args...)))
}
