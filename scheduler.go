package redisdelay

// This file owns the Scheduler: its configuration, Run (the instance that acts on ticks) and
// the calls that create, change and act on schedules. What one tick does is in
// scheduler_tick.go; the definition of a schedule in schedule.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// ScheduleTickTopic is the topic of the schedules' tick messages: one keyed message per
// schedule, due at its next tick. The Schedulers consume it as consumer group
// ScheduleTickGroup; the schedules' state lives in its hash slot.
const ScheduleTickTopic = "redisdelay.schedules"

// ScheduleTickGroup is the consumer group of the Schedulers on ScheduleTickTopic.
const ScheduleTickGroup = "scheduler"

const (
	// DefaultSchedulerLeaseTimeout is SchedulerConfig.LeaseTimeout when it is 0.
	DefaultSchedulerLeaseTimeout = 10 * time.Second
	// DefaultBufferRecheckInterval is SchedulerConfig.BufferRecheckInterval when it is 0.
	DefaultBufferRecheckInterval = time.Second
	// DefaultSchedulerConcurrency is SchedulerConfig.Concurrency when it is 0.
	DefaultSchedulerConcurrency = 8
	// MaxBackfillTicks bounds the ticks of one Scheduler.Backfill call.
	MaxBackfillTicks = 1000
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Client is the Redis client (a *redis.Client, *redis.ClusterClient, a Sentinel failover
	// client, ...). Required.
	Client redis.UniversalClient
	// KeyPrefix must be the Publishers' and Subscribers' key prefix; DefaultKeyPrefix when
	// empty.
	KeyPrefix string
	// Publisher configures how each tick's message is published (Partitions, Marshaler,
	// MaxMessageBytes, Metrics, ...); its Client and KeyPrefix are the Scheduler's, its
	// OnDuplicate is KeepExisting and its KeyRetention is TickKeyRetention.
	Publisher PublisherConfig
	// LeaseTimeout is the lease of a tick message while a Scheduler acts on it: a Scheduler that
	// dies holding one delays that tick, and the ticks that fall due meanwhile, by up to this
	// long, and never duplicates or skips them, for every overlap policy, provided it is shorter
	// than the schedule's catch-up window: the Scheduler that acts on the tick message again
	// owes its tick and every tick due since (docs/schedules.md, "A Scheduler cut short").
	// DefaultSchedulerLeaseTimeout when 0.
	LeaseTimeout time.Duration
	// TickKeyRetention is how long a tick's message key stays taken after the message is
	// finished in every group, so that a tick acted on again after a Scheduler died stores
	// nothing more. The Scheduler's publishing calls are fenced on the Redis clock at
	// OperationTimeout after the tick's state was read, so a call held up in the network stores
	// nothing once the key may be free again. 0 means 3 × the larger of LeaseTimeout and
	// OperationTimeout; it must be more than LeaseTimeout and than twice OperationTimeout.
	TickKeyRetention time.Duration
	// BufferRecheckInterval is how often a tick held back by OverlapBufferOne checks whether
	// the previous tick's message is finished. DefaultBufferRecheckInterval when 0.
	BufferRecheckInterval time.Duration
	// Concurrency is how many ticks one Scheduler acts on at once (one subscription of
	// ScheduleTickTopic each). DefaultSchedulerConcurrency when 0.
	Concurrency int
	// OperationTimeout bounds every Redis call; DefaultOperationTimeout when 0.
	OperationTimeout time.Duration
	// Consumer names this instance in its consumer group; random when empty.
	Consumer string
}

func (c *SchedulerConfig) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = DefaultSchedulerLeaseTimeout
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.TickKeyRetention == 0 {
		c.TickKeyRetention = 3 * max(c.LeaseTimeout, c.OperationTimeout)
	}
	if c.BufferRecheckInterval == 0 {
		c.BufferRecheckInterval = DefaultBufferRecheckInterval
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultSchedulerConcurrency
	}
	c.Publisher.Client, c.Publisher.KeyPrefix, c.Publisher.OperationTimeout = c.Client, c.KeyPrefix, c.OperationTimeout
	c.Publisher.OnDuplicate, c.Publisher.KeyRetention = KeepExisting, c.TickKeyRetention
}

// Validate reports the first invalid field of c (after defaults), naming it.
func (c SchedulerConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("redisdelay: SchedulerConfig.Client is nil")
	case c.LeaseTimeout < 10*time.Millisecond:
		return fmt.Errorf("redisdelay: SchedulerConfig.LeaseTimeout %s is less than 10ms", c.LeaseTimeout)
	case c.TickKeyRetention <= c.LeaseTimeout || c.TickKeyRetention <= 2*c.OperationTimeout:
		return fmt.Errorf("redisdelay: SchedulerConfig.TickKeyRetention %s is not more than LeaseTimeout %s and twice OperationTimeout %s", c.TickKeyRetention, c.LeaseTimeout, c.OperationTimeout)
	case c.BufferRecheckInterval < time.Millisecond:
		return fmt.Errorf("redisdelay: SchedulerConfig.BufferRecheckInterval %s is less than 1ms", c.BufferRecheckInterval)
	case c.Concurrency < 1:
		return fmt.Errorf("redisdelay: SchedulerConfig.Concurrency %d is less than 1", c.Concurrency)
	case c.OperationTimeout < 0:
		return fmt.Errorf("redisdelay: SchedulerConfig.OperationTimeout %s is negative", c.OperationTimeout)
	}
	return nil
}

// Scheduler publishes the messages of periodic schedules, exactly once per tick, with any
// number of Schedulers running against one Redis (or Redis Cluster) and no leader: each
// schedule's next tick is a keyed message on ScheduleTickTopic, due at the tick, which one
// Scheduler claims (an atomic Lua claim, under a lease); acting on it publishes the tick's
// message under its TickKey and, fenced by the schedule's state, arms the next tick in one
// script call. A Scheduler that dies mid-tick leaves its lease to expire; another acts on the
// tick again, and the tick's message key, still taken, makes that store nothing more.
// Schedules live in Redis: every Scheduler and Inspector sees the same set, and they survive
// restarts. See docs/schedules.md.
//
// The calls that change schedules (Put, Pause, Resume, Trigger, Backfill, Delete) work without
// Run: an operator's tool can make them while other processes run the Schedulers.
type Scheduler struct {
	config    SchedulerConfig
	logger    watermill.LoggerAdapter
	publisher *Publisher
	store     store.Store
	tickPart  store.Partition

	mu         sync.Mutex
	subscriber *Subscriber
	closed     bool
	compiled   sync.Map // version -> *compiledSchedule
	// compiledCount bounds compiled: past maxCompiled versions it starts again from empty.
	compiledCount atomic.Int64
}

// maxCompiled bounds the definitions a Scheduler keeps compiled.
const maxCompiled = 10_000

// NewScheduler returns a Scheduler. A nil logger means watermill.NopLogger. It makes no Redis
// call; an invalid config is returned as an error naming the field.
func NewScheduler(config SchedulerConfig, logger watermill.LoggerAdapter) (*Scheduler, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pub, err := NewPublisher(config.Publisher, logger)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: SchedulerConfig.Publisher: %w", err)
	}
	return &Scheduler{
		config:    config,
		logger:    logger.With(watermill.LogFields{"provider": "redisdelay", "component": "scheduler"}),
		publisher: pub,
		store:     pub.store,
		tickPart:  store.Partition{Topic: ScheduleTickTopic},
	}, nil
}

// Run acts on the ticks that fall due until ctx ends or Close is called, then returns nil
// after the ticks under way are done (a tick cut short is acted on again by another Scheduler
// once its lease expires). It returns an error when it cannot subscribe to ScheduleTickTopic.
// Run as many Schedulers as you like, in as many processes: each tick is acted on by one.
func (s *Scheduler) Run(ctx context.Context) error {
	sub, err := s.subscribe()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < s.config.Concurrency; i++ {
		msgs, err := sub.Subscribe(ctx, ScheduleTickTopic)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("redisdelay: scheduler: subscribe to %s: %w", ScheduleTickTopic, err)
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

// subscribe returns the Scheduler's Subscriber of ScheduleTickTopic, made on first use.
func (s *Scheduler) subscribe() (*Subscriber, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
	if s.subscriber != nil {
		return s.subscriber, nil
	}
	sub, err := NewSubscriber(SubscriberConfig{
		Client:           s.config.Client,
		KeyPrefix:        s.config.KeyPrefix,
		ConsumerGroup:    ScheduleTickGroup,
		Consumer:         s.config.Consumer,
		LeaseTimeout:     s.config.LeaseTimeout,
		NackBackoff:      ConstantBackoff(s.config.BufferRecheckInterval),
		MaxAttempts:      UnlimitedAttempts,
		OperationTimeout: s.config.OperationTimeout,
		// One tick per claim: ticks that fall due together spread over the subscriptions
		// instead of waiting in one subscription's claimed batch.
		ClaimBatchSize: 1,
		Metrics:        s.config.Publisher.Metrics,
	}, s.logger)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: scheduler: %w", err)
	}
	s.subscriber = sub
	return sub, nil
}

// Close stops Run and closes the Scheduler's Publisher and Subscriber. Calls after Close return
// ErrSchedulerClosed.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	s.closed = true
	sub := s.subscriber
	s.mu.Unlock()
	var errs []error
	if sub != nil {
		errs = append(errs, sub.Close())
	}
	errs = append(errs, s.publisher.Close())
	return errors.Join(errs...)
}

func (s *Scheduler) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// callContext bounds one call by OperationTimeout.
func (s *Scheduler) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.config.OperationTimeout)
}

// PutOutcome is what Put did with a schedule.
type PutOutcome string

const (
	// ScheduleCreated: there was no schedule of that name; it was stored and its first tick
	// armed.
	ScheduleCreated PutOutcome = "created"
	// ScheduleUpdated: the schedule's definition changed; the new one is stored and the next
	// tick recomputed from the Redis clock's now (the pending tick of the old one is dropped).
	ScheduleUpdated PutOutcome = "updated"
	// ScheduleUnchanged: the stored definition is the same; nothing changed.
	ScheduleUnchanged PutOutcome = "unchanged"
)

// Put creates the schedule, or updates it when its definition differs from the stored one
// (its first tick then recomputed after the Redis clock's now); an equal definition is left as
// it is. A paused schedule stays paused. It returns an error wrapping ErrInvalidSchedule that
// names the schedule and the field for a bad definition (nothing stored), ErrSchedulerClosed
// after Close, or the Redis error; within OperationTimeout (two calls).
func (s *Scheduler) Put(ctx context.Context, sch Schedule) (PutOutcome, error) {
	c, err := s.check(sch)
	if err != nil {
		return "", err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, nowUs, err := s.store.ScheduleStates(ctx, s.tickPart, c.Name)
	if err != nil {
		return "", s.errorf("put", c.Name, err)
	}
	def := c.encode()
	if states[0].Fields["def"] == def {
		return ScheduleUnchanged, nil
	}
	ver := store.NewToken()
	first, jitter := c.next(time.UnixMicro(nowUs)), c.jitter()
	var firstMsg *store.Outgoing
	if !first.IsZero() {
		m, err := s.tickOutgoing(c, ver, first, jitter)
		if err != nil {
			return "", err
		}
		firstMsg = &m
	}
	var outcome string
	err = s.publisher.groups.withGroups(ctx, s.tickPart, func(ctx context.Context, groups []string) (err error) {
		outcome, _, err = s.store.PutSchedule(ctx, s.tickPart, c.Name, def, ver, first.UnixMilli(), firstMsg, s.call(), groups)
		return err
	})
	if err != nil {
		return "", s.errorf("put", c.Name, err)
	}
	if old := states[0]; outcome == string(ScheduleUpdated) && old.Fields["next"] != "" {
		s.dropTick(ctx, old)
	}
	if err := s.publisher.topics.ensure(ctx, s.store, ScheduleTickTopic, 1, s.logger); err != nil {
		return PutOutcome(outcome), s.errorf("put", c.Name, err)
	}
	if outcome != string(ScheduleUnchanged) && states[0].Fields["paused"] != "1" {
		if err := s.storeAhead(ctx, c, first, jitter, time.UnixMicro(nowUs)); err != nil {
			return PutOutcome(outcome), s.errorf("put", c.Name, err)
		}
	}
	return PutOutcome(outcome), nil
}

// check compiles sch and checks that its message can be published (reserved metadata, size).
func (s *Scheduler) check(sch Schedule) (*compiledSchedule, error) {
	if s.isClosed() {
		return nil, ErrSchedulerClosed
	}
	c, err := sch.compile()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if _, _, err := s.publisher.outgoing(c.Topic, c.tickMessage(now, TickKey(c.Name, now)), now, false, 0); err != nil {
		return nil, fmt.Errorf("redisdelay: %w: schedule %s: %w", ErrInvalidSchedule, quote(c.Name), err)
	}
	return c, nil
}

// storeAhead stores the message of a prearmed schedule's tick at first, armed at now (Redis
// clock), due jitter after it. Should it fail, the tick publishes the message when it falls
// due; the error says so.
func (s *Scheduler) storeAhead(ctx context.Context, c *compiledSchedule, first time.Time, jitter time.Duration, now time.Time) error {
	if first.IsZero() || !c.prearmed() {
		return nil
	}
	if err := s.publishTicks(ctx, c, []time.Time{first}, []time.Time{first.Add(jitter)}, s.fence(now)); err != nil {
		return fmt.Errorf("stored, but the message of its tick %s not yet (the tick publishes it at its time): %w", first.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// call returns a new token for a script call that publishes.
func (s *Scheduler) call() store.Call {
	return store.Call{Token: store.NewToken(), TTL: s.publisher.callTTL}
}

// errorf wraps err of a call on schedule name.
func (s *Scheduler) errorf(op, name string, err error) error {
	return fmt.Errorf("redisdelay: %s schedule %s: %w", op, quote(name), err)
}

// dropTick cancels what a state's pending tick had stored ahead, once an update, a pause or a
// deletion made it stale: its tick message, and with a prearmed definition the tick's message
// on its topic. It is cleanup: a stale tick message that is not cancelled is dropped when it
// falls due; a message stored ahead that is not cancelled is delivered, and the failure is
// logged.
func (s *Scheduler) dropTick(ctx context.Context, st store.ScheduleState) {
	name, pending := st.Name, st.Fields["next"]
	key := tickMessageKey(name, st.Fields["ver"], pending)
	err := s.publisher.groups.withGroups(ctx, s.tickPart, func(ctx context.Context, groups []string) error {
		_, err := s.store.Cancel(ctx, s.tickPart, key, s.call(), groups)
		return err
	})
	if err != nil {
		s.logger.Debug("Could not cancel a stale tick message; it is dropped when it falls due", watermill.LogFields{"schedule": name, "key": key, "err": err.Error()})
	}
	c, err := decodeSchedule(name, st.Fields["def"])
	if err != nil || !c.prearmed() {
		return
	}
	key = TickKey(name, msTime(pending))
	part := store.Partition{Topic: c.Topic, N: keyPartition(key, s.config.Publisher.Partitions)}
	var res store.KeyResult
	err = s.publisher.groups.withGroups(ctx, part, func(ctx context.Context, groups []string) (err error) {
		res, err = s.store.Cancel(ctx, part, key, s.call(), groups)
		return err
	})
	if err != nil {
		s.logger.Error("Could not cancel the message a schedule stored ahead; it is delivered at its time", err, watermill.LogFields{"schedule": name, "topic": c.Topic, "key": key})
		return
	}
	// A message cancelled while it waited everywhere never happened: free its key, so that the
	// tick armed again at the same instant (Resume, an update that keeps the next tick, Delete
	// and Put) stores its message. One that some group holds in flight or has finished did
	// happen (a Scheduler acting on its tick may even be publishing it again): its key stays
	// taken.
	waited := res.Parked == store.Applied || slices.Contains(res.Groups, store.Applied)
	if !waited || slices.Contains(res.Groups, store.InFlight) || slices.Contains(res.Groups, store.Finished) {
		return
	}
	if _, err := s.store.ForgetKey(ctx, part, key); err != nil {
		s.logger.Error("Could not free the key of a cancelled message stored ahead; the tick armed again at its instant is stored once the key's retention ends", err, watermill.LogFields{"schedule": name, "topic": c.Topic, "key": key})
	}
}

// Delete deletes the schedule: no tick of it is published after Delete returns, save one under
// way at that moment on some Scheduler. It returns an error wrapping ErrNotFound when there is
// no such schedule, or the Redis error; within OperationTimeout.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, _, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return s.errorf("delete", name, err)
	}
	code, _, pending, err := s.store.DeleteSchedule(ctx, s.tickPart, name)
	switch {
	case err != nil:
		return s.errorf("delete", name, err)
	case code == 0:
		return s.errorf("delete", name, ErrNotFound)
	}
	if pending > 0 {
		s.dropTick(ctx, states[0])
	}
	return nil
}

// Pause pauses the schedule: no tick falls due while it is paused, and the ticks of the pause
// are not caught up on Resume. It reports whether it changed anything (false: paused
// already), or returns an error wrapping ErrNotFound, or the Redis error; within
// OperationTimeout.
func (s *Scheduler) Pause(ctx context.Context, name string) (bool, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	states, _, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return false, s.errorf("pause", name, err)
	}
	code, _, pending, err := s.store.PauseSchedule(ctx, s.tickPart, name)
	switch {
	case err != nil:
		return false, s.errorf("pause", name, err)
	case code < 0:
		return false, s.errorf("pause", name, ErrNotFound)
	}
	if pending > 0 {
		s.dropTick(ctx, states[0])
	}
	return code == 1, nil
}

// Resume resumes a paused schedule: its next tick is the first after the Redis clock's now. It
// reports whether it changed anything (false: not paused), or returns an error wrapping
// ErrNotFound, or the Redis error; within OperationTimeout.
func (s *Scheduler) Resume(ctx context.Context, name string) (bool, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	st, c, now, err := s.read(ctx, name)
	if err != nil {
		return false, s.errorf("resume", name, err)
	}
	if st.Fields["paused"] != "1" {
		return false, nil
	}
	next, jitter := c.next(now), c.jitter()
	var msgs []store.Outgoing
	a := store.Advance{Mode: store.AdvanceResume, Version: st.Fields["ver"], Next: ""}
	if !next.IsZero() {
		m, err := s.tickOutgoing(c, a.Version, next, jitter)
		if err != nil {
			return false, err
		}
		msgs, a.Next = []store.Outgoing{m}, fmt.Sprint(next.UnixMilli())
	}
	done, err := s.advance(ctx, name, a, msgs)
	if err != nil {
		return false, s.errorf("resume", name, err)
	}
	if done {
		if err := s.storeAhead(ctx, c, next, jitter, now); err != nil {
			return true, s.errorf("resume", name, err)
		}
	}
	return done, nil
}

// read returns schedule name's state, its compiled definition and the Redis clock's now, or an
// error wrapping ErrNotFound.
func (s *Scheduler) read(ctx context.Context, name string) (store.ScheduleState, *compiledSchedule, time.Time, error) {
	states, nowUs, err := s.store.ScheduleStates(ctx, s.tickPart, name)
	if err != nil {
		return store.ScheduleState{}, nil, time.Time{}, err
	}
	st := states[0]
	if !st.Exists() {
		return st, nil, time.Time{}, ErrNotFound
	}
	c, err := s.compiledOf(st)
	return st, c, time.UnixMicro(nowUs), err
}

// compiledOf returns the compiled definition of a state, cached by version.
func (s *Scheduler) compiledOf(st store.ScheduleState) (*compiledSchedule, error) {
	ver := st.Fields["ver"]
	if c, ok := s.compiled.Load(ver); ok {
		return c.(*compiledSchedule), nil
	}
	c, err := decodeSchedule(st.Name, st.Fields["def"])
	if err != nil {
		return nil, err
	}
	if s.compiledCount.Add(1) > maxCompiled {
		s.compiled.Clear()
		s.compiledCount.Store(1)
	}
	s.compiled.Store(ver, c)
	return c, nil
}

// advance runs periodic_advance.lua with the tick topic's groups.
func (s *Scheduler) advance(ctx context.Context, name string, a store.Advance, msgs []store.Outgoing) (bool, error) {
	var done bool
	err := s.publisher.groups.withGroups(ctx, s.tickPart, func(ctx context.Context, groups []string) (err error) {
		done, err = s.store.AdvanceSchedule(ctx, s.tickPart, name, a, msgs, s.call(), groups)
		return err
	})
	return done, err
}

// Trigger publishes the schedule's message now, out of its spec, with the Redis clock's now as
// its tick time and key TickKey(name, now) with "!" appended; the spec's ticks go on as before.
// It returns the message's UUID, an error wrapping ErrNotFound, or Publish's errors.
func (s *Scheduler) Trigger(ctx context.Context, name string) (string, error) {
	cctx, cancel := s.callContext(ctx)
	defer cancel()
	_, c, now, err := s.read(cctx, name)
	if err != nil {
		return "", s.errorf("trigger", name, err)
	}
	msg := c.tickMessage(now, TickKey(name, now)+"!")
	if err := s.publisher.Publish(c.Topic, msg); err != nil {
		return "", s.errorf("trigger", name, err)
	}
	return msg.UUID, nil
}

// BackfillResult is what Backfill published.
type BackfillResult struct {
	// Published counts the ticks whose message was published.
	Published int
	// Duplicates counts the ticks whose message key was taken (the tick was published already,
	// and its message is still held or within TickKeyRetention): nothing was stored for them.
	Duplicates int
}

// Backfill publishes, due at once, one message for each tick of the schedule's spec from from
// to to (both included, nominal times), each with its nominal time and TickKey, oldest first:
// a tick whose key is taken stores nothing (see BackfillResult). Every tick of the range is
// published, or the error says how many were. It refuses, before publishing anything, with an
// error wrapping ErrInvalidSchedule: a range of more than MaxBackfillTicks ticks, a range that
// ends more than MaxDelay after the Redis clock's now (also wrapping ErrBeyondMaxDelay), and a
// gap of more than ScheduleHorizon without a tick inside the range. It returns an error
// wrapping ErrNotFound, ctx's error when ctx ends (checked between ticks), or Publish's errors;
// ticks published before an error stay published, and the error says how many there were.
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time) (BackfillResult, error) {
	cctx, cancel := s.callContext(ctx)
	_, c, now, err := s.read(cctx, name)
	cancel()
	if err != nil {
		return BackfillResult{}, s.errorf("backfill", name, err)
	}
	rangeText := from.UTC().Format(time.RFC3339) + " to " + to.UTC().Format(time.RFC3339)
	if err := checkAhead(to.Sub(now)); err != nil {
		return BackfillResult{}, scheduleError(name, "backfill range", rangeText, err)
	}
	ticks, err := c.ticksBetween(ctx, from, to)
	switch {
	case err != nil && ctx.Err() != nil:
		return BackfillResult{}, s.errorf("backfill", name, fmt.Errorf("nothing published: %w", err))
	case err != nil:
		return BackfillResult{}, scheduleError(name, "backfill range", rangeText, fmt.Errorf("%w; nothing published", err))
	}
	var res BackfillResult
	for len(ticks) > 0 {
		chunk := ticks[:min(len(ticks), 100)]
		ticks = ticks[len(chunk):]
		msgs := make([]*message.Message, len(chunk))
		for i, t := range chunk {
			msgs[i] = c.tickMessage(t, TickKey(name, t))
		}
		outcomes, err := s.publishBackfill(ctx, c.Topic, msgs)
		if err != nil {
			return res, s.errorf("backfill", name, fmt.Errorf("%d of %d ticks published before: %w", res.Published+res.Duplicates, res.Published+res.Duplicates+len(chunk)+len(ticks), err))
		}
		for _, o := range outcomes {
			if o == OutcomeDuplicate {
				res.Duplicates++
			} else {
				res.Published++
			}
		}
	}
	return res, nil
}

// publishBackfill publishes one chunk of a backfill unless ctx has ended.
func (s *Scheduler) publishBackfill(ctx context.Context, topic string, msgs []*message.Message) ([]Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.publisher.PublishWithResult(topic, msgs...)
}

// ticksBetween returns the ticks from from to to, both included: at most MaxBackfillTicks, each
// found within ScheduleHorizon of the one before, until ctx ends.
func (c *compiledSchedule) ticksBetween(ctx context.Context, from, to time.Time) ([]time.Time, error) {
	var ticks []time.Time
	for t := from.Add(-time.Millisecond); ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next, err := c.nextTick(t)
		switch {
		case err != nil && !t.Add(ScheduleHorizon).Before(to):
			return ticks, nil // the search covered the rest of the range
		case err != nil:
			return nil, fmt.Errorf("has no tick within ScheduleHorizon (%s) after %s", ScheduleHorizon, t.UTC().Format(time.RFC3339))
		case next.After(to):
			return ticks, nil
		case len(ticks) == MaxBackfillTicks:
			return nil, fmt.Errorf("holds more than %d ticks", MaxBackfillTicks)
		}
		ticks, t = append(ticks, next), next
	}
}
