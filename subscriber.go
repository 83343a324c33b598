package redisdelay

// This file owns the Subscriber: registration of its consumer group, Subscribe, which starts a
// partitionConsumer per partition, and Close.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
	"github.com/watermill-redisdelay/redisdelay/internal/wake"
)

// Subscriber consumes messages of one consumer group. It implements message.Subscriber and
// message.SubscribeInitializer and is safe for concurrent use. Each Subscribe call is a
// subscription with its own unbuffered output channel and at most one message in flight.
type Subscriber struct {
	config  SubscriberConfig
	logger  watermill.LoggerAdapter
	store   store.Store
	wakeHub *wake.Hub
	// deadLetterGroups is the view of the consumer groups of the dead-letter topics.
	deadLetterGroups groupCache

	eviction evictionGuard
	// topics remembers the topics written to the topic registry.
	topics registeredTopics
	// clock reads the delay metadata of nacked messages against; the real clock but in the
	// test kit (see internal/clock).
	clock clock.Clock
	// claimAhead replaces the constant claimAhead when a test sets it (see aheadTime).
	claimAhead time.Duration
	// worker is this Subscriber's worker record (see workers.go).
	worker *worker
	// watch tells a watched clock (the test kit's, through a Scheduler) of the subscriptions.
	watch clock.Watch

	mu     sync.Mutex // guards closed, closedAt and wg.Add
	closed bool
	// closedAt is when Close was called: the deletion of the worker record ends within
	// OperationTimeout of it (see workerGone).
	closedAt time.Time
	// closing ends when Close is called; every subscription's context derives from it.
	closing     context.Context
	stopClosing context.CancelFunc
	wg          sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber. A nil logger means watermill.NopLogger. It makes no Redis
// call; an invalid config is returned as an error naming the field.
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{
		"provider":       "redisdelay",
		"consumer_group": config.ConsumerGroup,
		"consumer":       config.Consumer,
	})
	closing, stopClosing := context.WithCancel(context.Background())
	st := store.New(config.Client, config.KeyPrefix, store.Options{Observe: observeScripts(config.Metrics)})
	return &Subscriber{
		config:      config,
		logger:      logger,
		store:       st,
		wakeHub:     wake.NewHub(config.Client, logger),
		eviction:    evictionGuard{store: st, allow: config.AllowEvictingRedis, logger: logger},
		worker:      newWorker(config),
		closing:     closing,
		stopClosing: stopClosing,
	}, nil
}

// SubscribeInitialize registers the subscriber's consumer group on topic (one script: SADD
// to the topic's group set), so that every message published from then on is kept for the
// group, even while none of its subscribers runs. The first group registered on a topic also
// receives the messages published while the topic had no group, and a group registered within
// the topic's new-group window receives those and the messages published since the first
// group registered (see SubscriberConfig.NewGroupWindow). Registering a group that is
// registered already writes nothing, so it works on a full Redis. Subscribe does the same.
// Errors: ErrSubscriberClosed, an error wrapping ErrInvalidName (for the topic, or for its
// dead-letter topic as Subscribe refuses it), ErrEvictingRedis (see
// SubscriberConfig.AllowEvictingRedis), or the Redis error wrapped with topic and group, within
// OperationTimeout.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := ValidateName("topic", topic); err != nil {
		return err
	}
	if _, err := s.deadLetterTopic(topic); err != nil {
		return err // Subscribe would refuse it: register nothing
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrSubscriberClosed
	}
	_, err := s.register(context.Background(), topic)
	return err
}

// register adds the consumer group to every partition of topic, once Redis is known not to
// evict keys. It returns the group's registration on each partition: its epoch (see
// register.lua) and when the partition's new-group window ends on the local clock (no earlier
// than on the Redis clock), the zero time when none is open.
func (s *Subscriber) register(ctx context.Context, topic string) ([]registration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.config.OperationTimeout)
	defer cancel()
	if err := s.eviction.check(ctx); err != nil {
		return nil, err
	}
	// A dead-letter topic's parked set holds its dead letters, which List and Requeue read:
	// it keeps them for its first group as it always did.
	window := s.config.NewGroupWindow
	if window < 0 || strings.Contains(topic, DeadLetterInfix) {
		window = 0
	}
	if err := s.ensureTopics(ctx, topic); err != nil {
		return nil, err
	}
	regs := make([]registration, s.config.Partitions)
	for n := range regs {
		epoch, left, err := s.store.RegisterGroup(ctx, store.Partition{Topic: topic, N: n}.Of(s.config.ConsumerGroup), window, NewGroupWindowMaxMessages)
		if err != nil {
			return nil, fmt.Errorf("redisdelay: register consumer group %s on topic %s partition %d: %w", quote(s.config.ConsumerGroup), quote(topic), n, err)
		}
		regs[n].epoch = epoch
		if left >= 0 {
			regs[n].windowEnd = time.Now().Add(left)
		}
	}
	return regs, nil
}

// registration is a consumer group's registration on one topic partition.
type registration struct {
	// epoch names the registration (see register.lua); "" when it has not been made.
	epoch string
	// windowEnd is when the partition's new-group window ends, on the local clock; zero when
	// none is open.
	windowEnd time.Time
}

// Subscribe registers the consumer group on topic and returns an unbuffered channel of its
// messages, each handed out when due and held under a lease until Ack or Nack. The next
// message comes only after the previous one was acked or nacked. A message's context is
// derived from ctx and is cancelled after Ack or Nack, and when the subscription stops.
//
// The subscription stops when ctx is cancelled or the Subscriber is closed: messages it claimed
// and had not finished are released to the group, and the channel is closed. If Redis cannot be
// reached, Subscribe still returns the channel and the subscription keeps trying in the
// background, logging each failure and backing off.
//
// Errors: ErrSubscriberClosed after Close, an error wrapping ErrInvalidName for a bad topic
// or a dead-letter topic (see SubscriberConfig.DeadLetterTopic) that cannot be used,
// ErrEvictingRedis (see SubscriberConfig.AllowEvictingRedis), or one naming the topic and both
// counts when the topic registry holds other partitions for it (see SubscriberConfig.Partitions).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := ValidateName("topic", topic); err != nil {
		return nil, err
	}
	deadLetterTopic, err := s.deadLetterTopic(topic)
	if err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	logger := s.logger.With(watermill.LogFields{"topic": topic})
	regs, err := s.register(ctx, topic)
	if errors.Is(err, ErrEvictingRedis) || errors.Is(err, errPartitionsDisagree) {
		s.wg.Add(-(s.config.Partitions + 1))
		return nil, err
	} else if err != nil {
		logger.Error("Cannot register consumer group yet, retrying in the background", err, nil)
		regs = make([]registration, s.config.Partitions) // each registers in the background
	}
	s.startRecord(WorkerSubscription{Topic: topic, Group: s.config.ConsumerGroup})
	ended := s.watch.Subscription(topic, s.config.Partitions, s.config.LeaseTimeout)
	ctx, cancel := context.WithCancel(ctx) // one per Subscribe call: it ends with ctx or with Close
	stopCancel := context.AfterFunc(s.closing, cancel)
	out, turn := make(chan *message.Message), make(chan struct{}, 1)
	var running sync.WaitGroup
	running.Add(s.config.Partitions)
	for n := 0; n < s.config.Partitions; n++ {
		sub := newPartitionConsumer(s, ctx, topic, deadLetterTopic, n, out, turn, logger)
		go func() {
			defer s.wg.Done()
			defer running.Done()
			sub.run(regs[sub.partition])
		}()
	}
	go func() {
		defer s.wg.Done()
		running.Wait()
		s.worker.unsubscribed(WorkerSubscription{Topic: topic, Group: s.config.ConsumerGroup})
		stopCancel()
		cancel()
		close(out)
		ended()
	}()
	logger.Info("Subscribed", watermill.LogFields{"partitions": s.config.Partitions})
	return out, nil
}

// enter counts the goroutines of a new subscription (the partitions' and the closer of its
// channel) in wg, or returns ErrSubscriberClosed after Close.
func (s *Subscriber) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSubscriberClosed
	}
	s.wg.Add(s.config.Partitions + 1)
	return nil
}

// startRecord records a running subscription in the worker record, and starts the heartbeat
// that keeps the record at the first one, unless WorkerHeartbeat is negative or the Subscriber
// is closed.
func (s *Subscriber) startRecord(sub WorkerSubscription) {
	if !s.worker.subscribed(sub) || s.config.WorkerHeartbeat < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.wg.Add(1)
		go s.beat()
	}
}

// Close stops every subscription, releases the messages they hold to their groups, deletes the
// Subscriber's worker record (see Inspector.Workers), closes every output channel and waits for
// all goroutines. It never closes the Redis client. It is idempotent and returns nil; releasing
// and the deletion are bounded by OperationTimeout, so Close returns in bounded time even while
// Redis is down (the leases of messages it could not release expire, and so does the record).
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed, s.closedAt = true, time.Now()
	s.stopClosing()
	s.mu.Unlock()

	s.wg.Wait()
	s.wakeHub.Close()
	s.watch.Close()
	s.logger.Debug("Subscriber closed", nil)
	return nil
}

// ensureTopics writes topic and its dead-letter topic to the topic registry, with the
// subscriber's partitions (a group's dead letters wait on the partition of the dead-letter
// topic that matches their own), and refuses a topic registered with other partitions.
func (s *Subscriber) ensureTopics(ctx context.Context, topic string) error {
	if err := s.topics.ensure(ctx, s.store, topic, s.config.Partitions, s.logger); err != nil {
		return err
	}
	if dlt, err := s.deadLetterTopic(topic); err == nil {
		return s.topics.ensure(ctx, s.store, dlt, s.config.Partitions, s.logger)
	}
	return nil
}
