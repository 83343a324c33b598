package schedule

// This file owns the Scheduler's configuration: Config, its defaults and its validation.

import (
	"errors"
	"fmt"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
)

// TickTopic is the topic of the schedules' tick messages: one keyed message per schedule, due
// at its next tick. The Schedulers consume it as consumer group TickGroup; the schedules' state
// lives in its hash slot.
const TickTopic = "redisdelay.schedules"

// TickGroup is the consumer group of the Schedulers on TickTopic.
const TickGroup = "scheduler"

const (
	// DefaultLeaseTimeout is Config.LeaseTimeout when it is 0.
	DefaultLeaseTimeout = 10 * time.Second
	// DefaultBufferRecheckInterval is Config.BufferRecheckInterval when it is 0.
	DefaultBufferRecheckInterval = time.Second
	// DefaultConcurrency is Config.Concurrency when it is 0.
	DefaultConcurrency = 8
	// MaxBackfillTicks bounds the ticks of one Scheduler.Backfill call.
	MaxBackfillTicks = 1000
)

// Config configures a Scheduler.
type Config struct {
	// Publisher publishes each tick's message, and its Redis client, key prefix, partitions,
	// marshaler, MaxMessageBytes, OperationTimeout and metrics are the Scheduler's: the schedules
	// live under its key prefix, and every call of the Scheduler is bounded by its
	// OperationTimeout. Required. The Scheduler never closes it; once it is closed, the
	// Scheduler's publishes fail with redisdelay.ErrPublisherClosed. Its OnDuplicate and
	// KeyRetention do not apply to tick messages: those keep the first message of their key for
	// TickKeyRetention.
	Publisher *redisdelay.Publisher
	// LeaseTimeout is the lease of a tick message while a Scheduler acts on it: a Scheduler that
	// dies holding one delays that tick, and the ticks that fall due meanwhile, by up to this
	// long, and never duplicates or skips them, for every overlap policy, provided it is shorter
	// than the schedule's catch-up window: the Scheduler that acts on the tick message again
	// owes its tick and every tick due since (docs/schedules.md, "A Scheduler cut short").
	// DefaultLeaseTimeout when 0.
	LeaseTimeout time.Duration
	// TickKeyRetention is how long a tick's message key stays taken after the message is
	// finished in every group, so that a tick acted on again after a Scheduler died stores
	// nothing more. The Scheduler's publishing calls are fenced on the Redis clock at the
	// Publisher's OperationTimeout after the tick's state was read, so a call held up in the
	// network stores nothing once the key may be free again. 0 means 3 × the larger of
	// LeaseTimeout and that OperationTimeout; it must be more than LeaseTimeout and than twice
	// OperationTimeout.
	TickKeyRetention time.Duration
	// BufferRecheckInterval is how often a tick held back by OverlapBufferOne checks whether
	// the previous tick's message is finished. DefaultBufferRecheckInterval when 0.
	BufferRecheckInterval time.Duration
	// Concurrency is how many ticks one Scheduler acts on at once (one subscription of
	// TickTopic each). DefaultConcurrency when 0.
	Concurrency int
	// Consumer names this instance in its consumer group; random when empty.
	Consumer string
	// WorkerHeartbeat is how often a running Scheduler refreshes its worker record, of kind
	// redisdelay.WorkerScheduler (see redisdelay.Inspector.Workers), as
	// redisdelay.SubscriberConfig.WorkerHeartbeat: redisdelay.DefaultWorkerHeartbeat when 0,
	// at least 10ms, negative for no record (its schedules then show overdue ticks as if no
	// Scheduler ran).
	WorkerHeartbeat time.Duration
}

// setDefaults fills in the zero fields; opTimeout is the Publisher's OperationTimeout.
func (c *Config) setDefaults(opTimeout time.Duration) {
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = DefaultLeaseTimeout
	}
	if c.TickKeyRetention == 0 {
		c.TickKeyRetention = 3 * max(c.LeaseTimeout, opTimeout)
	}
	if c.BufferRecheckInterval == 0 {
		c.BufferRecheckInterval = DefaultBufferRecheckInterval
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
}

// Validate reports the first invalid field of c (after defaults), naming it.
func (c Config) Validate() error {
	if c.Publisher == nil {
		return errors.New("schedule: Config.Publisher is nil")
	}
	opTimeout := seam.PublisherOf(c.Publisher).OperationTimeout()
	switch {
	case c.LeaseTimeout < 10*time.Millisecond:
		return fmt.Errorf("schedule: Config.LeaseTimeout %s is less than 10ms", c.LeaseTimeout)
	case c.TickKeyRetention <= c.LeaseTimeout || c.TickKeyRetention <= 2*opTimeout:
		return fmt.Errorf("schedule: Config.TickKeyRetention %s is not more than LeaseTimeout %s and twice the Publisher's OperationTimeout %s", c.TickKeyRetention, c.LeaseTimeout, opTimeout)
	case c.WorkerHeartbeat > 0 && c.WorkerHeartbeat < 10*time.Millisecond:
		return fmt.Errorf("schedule: Config.WorkerHeartbeat %s is less than 10ms (negative keeps no worker record)", c.WorkerHeartbeat)
	case c.BufferRecheckInterval < time.Millisecond:
		return fmt.Errorf("schedule: Config.BufferRecheckInterval %s is less than 1ms", c.BufferRecheckInterval)
	case c.Concurrency < 1:
		return fmt.Errorf("schedule: Config.Concurrency %d is less than 1", c.Concurrency)
	}
	return nil
}
