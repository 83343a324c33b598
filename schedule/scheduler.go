// Package schedule publishes the messages of periodic (cron) schedules through a
// *redisdelay.Publisher, exactly once per tick, with any number of Schedulers and no leader.
// The schedules live in Redis under the Publisher's key prefix; List and Get read them through
// a *redisdelay.Inspector. See docs/schedules.md.
package schedule

// This file owns the Scheduler: its construction, Run (the instance that acts on ticks), Close
// and the helpers of its calls. The calls that create, change and act on schedules are in
// put.go and backfill.go, what one tick does in tick.go and fire.go, the definition of a
// schedule in schedule.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// ErrClosed is returned by a Scheduler's calls after Close.
var ErrClosed = errors.New("schedule: scheduler is closed")

// ErrInvalid is wrapped by the errors of a Schedule that cannot be stored (see Scheduler.Put),
// which name the schedule and the field, and by those of NextTicks and Scheduler.Backfill for a
// spec with no tick within Horizon or a bad range.
var ErrInvalid = errors.New("invalid schedule")

// Scheduler publishes the messages of periodic schedules, exactly once per tick, with any
// number of Schedulers running against one Redis (or Redis Cluster) and no leader: each
// schedule's next tick is a keyed message on TickTopic, due at the tick, which one Scheduler
// claims (an atomic Lua claim, under a lease); acting on it publishes the tick's message under
// its TickKey and, fenced by the schedule's state, arms the next tick in one script call. A
// Scheduler that dies mid-tick leaves its lease to expire; another acts on the tick again, and
// the tick's message key, still taken, makes that store nothing more. Schedules live in Redis:
// every Scheduler and Inspector of the key prefix sees the same set, and they survive restarts.
//
// The calls that change schedules (Put, Pause, Resume, Trigger, Backfill, Delete) work without
// Run: an operator's tool can make them while other processes run the Schedulers.
type Scheduler struct {
	config   Config
	logger   watermill.LoggerAdapter
	pub      seam.Publisher
	store    store.Store
	tickPart store.Partition
	// opTimeout is the Publisher's OperationTimeout: it bounds every call.
	opTimeout time.Duration

	mu         sync.Mutex
	subscriber message.Subscriber
	closed     bool
	compiled   sync.Map // version -> *compiledSchedule
	// compiledCount bounds compiled: past maxCompiled versions it starts again from empty.
	compiledCount atomic.Int64
}

func init() {
	seam.SchedulerPublisher = func(s any) any {
		if sch, ok := s.(*Scheduler); ok && sch != nil {
			return sch.config.Publisher
		}
		return nil
	}
}

// maxCompiled bounds the definitions a Scheduler keeps compiled.
const maxCompiled = 10_000

// New returns a Scheduler that publishes through config.Publisher. A nil logger means
// watermill.NopLogger. It makes no Redis call; an invalid config is returned as an error naming
// the field.
func New(config Config, logger watermill.LoggerAdapter) (*Scheduler, error) {
	if config.Publisher == nil {
		return nil, config.Validate()
	}
	pub := seam.PublisherOf(config.Publisher)
	config.setDefaults(pub.OperationTimeout())
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Scheduler{
		config:    config,
		logger:    logger.With(watermill.LogFields{"provider": "redisdelay", "component": "scheduler"}),
		pub:       pub,
		store:     pub.Store(),
		tickPart:  store.Partition{Topic: TickTopic},
		opTimeout: pub.OperationTimeout(),
	}, nil
}

// Run acts on the ticks that fall due until ctx ends or Close is called, then returns nil
// after the ticks under way are done (a tick cut short is acted on again by another Scheduler
// once its lease expires). It returns an error when it cannot subscribe to TickTopic. Run as
// many Schedulers as you like, in as many processes: each tick is acted on by one.
func (s *Scheduler) Run(ctx context.Context) error {
	sub, err := s.subscribe()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < s.config.Concurrency; i++ {
		msgs, err := sub.Subscribe(ctx, TickTopic)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("schedule: scheduler: subscribe to %s: %w", TickTopic, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range msgs {
				s.act(ctx, msg)
			}
		}()
	}
	wg.Wait()
	return nil
}

// subscribe returns the Scheduler's Subscriber of TickTopic, of the Publisher's layout, made
// on first use.
func (s *Scheduler) subscribe() (message.Subscriber, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.subscriber != nil {
		return s.subscriber, nil
	}
	sub, err := s.pub.NewSubscriber(seam.SubscriberOptions{
		ConsumerGroup: TickGroup,
		Consumer:      s.config.Consumer,
		LeaseTimeout:  s.config.LeaseTimeout,
		NackDelay:     s.config.BufferRecheckInterval,
		// One tick per claim: ticks that fall due together spread over the subscriptions
		// instead of waiting in one subscription's claimed batch.
		ClaimBatchSize:  1,
		Kind:            string(redisdelay.WorkerScheduler),
		WorkerHeartbeat: s.config.WorkerHeartbeat,
	}, s.logger)
	if err != nil {
		return nil, fmt.Errorf("schedule: scheduler: %w", err)
	}
	s.subscriber = sub
	return sub, nil
}

// Close stops Run and closes the Scheduler's Subscriber; it never closes the Publisher. Calls
// after Close return ErrClosed.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	s.closed = true
	sub := s.subscriber
	s.mu.Unlock()
	if sub != nil {
		return sub.Close()
	}
	return nil
}

func (s *Scheduler) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// callContext bounds one call by the Publisher's OperationTimeout.
func (s *Scheduler) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

// errorf wraps err of a call on schedule name.
func (s *Scheduler) errorf(op, name string, err error) error {
	return fmt.Errorf("schedule: %s schedule %s: %w", op, store.Quote(name), err)
}

// withTickGroups runs try with the consumer groups of TickTopic.
func (s *Scheduler) withTickGroups(ctx context.Context, try func(ctx context.Context, groups []string) error) error {
	return s.pub.WithGroups(ctx, s.tickPart, try)
}
