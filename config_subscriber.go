package redisdelay

// This file owns the Subscriber's config (with ExpiryAction, the type of its OnExpired), its
// defaults and its Validate rules; the Publisher's config, BatchConfig and the shared defaults
// are in config.go.

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// SubscriberConfig configures a Subscriber. The zero value of every field but Client means its
// documented default.
type SubscriberConfig struct {
	// Client is the Redis connection, as in PublisherConfig. Required. Close never closes it.
	// Each Subscriber also holds one Pub/Sub connection of this client for wake-ups.
	Client redis.UniversalClient
	// KeyPrefix is the namespace of keys and channels; DefaultKeyPrefix when empty.
	KeyPrefix string
	// Marshaler decodes messages, and encodes dead letters and the changes a handler makes to a
	// message before Nack; DefaultMarshalerUnmarshaler when nil.
	Marshaler MarshalerUnmarshaler
	// ConsumerGroup is the group this subscriber consumes for. Every group registered on a
	// topic receives every message published after it registered (fan-out); the subscribers of
	// one group compete for its messages. Empty means DefaultConsumerGroup.
	ConsumerGroup string
	// Consumer names this subscriber in logs and in its worker record (see Inspector.Workers);
	// a random UUID when empty.
	Consumer string
	// LeaseTimeout is how long a claimed message stays invisible to the other consumers of its
	// group. While a message is held, the subscriber extends its lease every LeaseTimeout/3;
	// when the holder stops extending (it crashed), the message is delivered again after the
	// lease, with its attempt count raised by one. DefaultLeaseTimeout when zero.
	LeaseTimeout time.Duration
	// NackBackoff decides when a nacked message is due again; DefaultNackBackoff when nil.
	// A Nack after a middleware such as middleware.DelayOnError changed the message's delay
	// metadata uses that metadata instead (see DelayOf).
	NackBackoff Backoff
	// ClaimBatchSize is the most messages one claim takes from Redis. Messages are still handed
	// out one at a time; the subscription claims fewer when its handler is slow, so that
	// claimed messages wait at most about 100 ms of handler time. DefaultClaimBatchSize when
	// zero.
	ClaimBatchSize int
	// RecheckInterval is the longest an idle subscription sleeps before it asks Redis again,
	// a safety net for wake-ups lost while the Pub/Sub connection was down. Each partition of a
	// subscription rechecks at whole multiples of RecheckInterval after a random phase drawn
	// when it starts, so an idle one asks exactly every RecheckInterval, and subscriptions that
	// started or were woken together spread their rechecks evenly over the interval.
	// DefaultRecheckInterval when zero.
	RecheckInterval time.Duration
	// MaxAttempts is how many deliveries a message gets in this consumer group. When the last
	// one is nacked, or its lease expires, the message is moved, in the same Lua call, to the
	// dead-letter topic. DefaultMaxAttempts when zero; UnlimitedAttempts (-1) never gives up.
	MaxAttempts int
	// DeadLetterTopic names the dead-letter topic of a topic and consumer group;
	// DefaultDeadLetterTopic when nil. Any valid topic name other than the topic works, and
	// many topics may share one. A name that starts with the topic followed by DeadLetterInfix
	// shares the topic's hash slot, and the move is one atomic script call; any other name
	// takes two steps that can each run again without losing or duplicating the dead letter
	// (see the README).
	DeadLetterTopic func(topic, group string) string
	// Partitions is the number of partitions of every topic, as in PublisherConfig; 1 when
	// zero. A subscription claims from all of them, each woken on its own, and still hands out
	// one message at a time. A dead-letter topic has as many partitions as its source topic.
	Partitions int
	// OperationTimeout bounds each Redis call; DefaultOperationTimeout when zero.
	OperationTimeout time.Duration
	// AllowEvictingRedis lets the Subscriber work on a Redis whose maxmemory-policy evicts
	// keys; see PublisherConfig.AllowEvictingRedis.
	AllowEvictingRedis bool
	// Metrics receives this Subscriber's claims, lateness, acks, nacks, expired leases, expired
	// deadlines (OnExpired), dead letters and script durations (see Metrics); none when nil.
	// metrics.New, in the metrics package, gives the Prometheus ones.
	Metrics Metrics
	// NewGroupWindow is how long, on the Redis clock, a topic partition keeps its messages for
	// the groups that register shortly after its first one: when this subscriber registers the
	// first group of a partition, the partition keeps the messages published before it (parked)
	// and those published during the window, stored once (a keyed message twice: the window's
	// copy holds no key, so a key is free once the registered groups are done with its
	// message; docs/guarantees.md, "Keys and the window"), and every group registering within
	// the window receives them with their original due times. So the handlers of one Watermill
	// router, subscribed one after another, miss nothing of what was published between their
	// registrations. Past the window a group receives what is published after it registered.
	// At most NewGroupWindowMaxMessages messages per partition; the kept messages are freed
	// once the window has ended. Millisecond precision. DefaultNewGroupWindow when zero; a
	// negative value opens no window (the first group takes the parked messages over, and a
	// later group receives only what is published after it). Dead-letter topics (names with
	// DeadLetterInfix) never have a window.
	NewGroupWindow time.Duration
	// OnExpired is what this consumer group does with a message it claims for its first
	// attempt after the message's deliver-by deadline (DeliverByMetadataKey,
	// DeliverWithinMetadataKey; compared with the Redis clock of the claim): the message is not
	// handed out, and is moved to the dead-letter topic with DeadLetterReasonExpired
	// (ExpiryActionDeadLetter, the default when empty) or acked and dropped (ExpiryActionDrop).
	// Either way it is reported to Metrics.Expired and logged. Later attempts of a message
	// claimed in time are delivered whatever their deadline.
	OnExpired ExpiryAction
	// WorkerHeartbeat is how often, on the client clock, this Subscriber refreshes its worker
	// record (see Inspector.Workers): from its first Subscribe until Close, which deletes the
	// record, one script call per interval for the whole Subscriber, whatever its
	// subscriptions. The record expires WorkerRecordLifetimes × WorkerHeartbeat after its last
	// refresh on the Redis clock, so a process that died is gone from Inspector.Workers within
	// that. DefaultWorkerHeartbeat when zero; at least 10ms; negative keeps no record.
	WorkerHeartbeat time.Duration

	// kind is the kind of worker this Subscriber records: WorkerSubscriber, or WorkerScheduler
	// for a Scheduler's Subscriber (set through internal/seam).
	kind WorkerKind
}

func (c *SubscriberConfig) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Marshaler == nil {
		c.Marshaler = DefaultMarshalerUnmarshaler{}
	}
	if c.ConsumerGroup == "" {
		c.ConsumerGroup = DefaultConsumerGroup
	}
	if c.Consumer == "" {
		c.Consumer = uuid.NewString()
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = DefaultLeaseTimeout
	}
	if c.NackBackoff == nil {
		c.NackBackoff = DefaultNackBackoff
	}
	if c.ClaimBatchSize == 0 {
		c.ClaimBatchSize = DefaultClaimBatchSize
	}
	if c.RecheckInterval == 0 {
		c.RecheckInterval = DefaultRecheckInterval
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.DeadLetterTopic == nil {
		c.DeadLetterTopic = DefaultDeadLetterTopic
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.NewGroupWindow == 0 {
		c.NewGroupWindow = DefaultNewGroupWindow
	}
	if c.WorkerHeartbeat == 0 {
		c.WorkerHeartbeat = DefaultWorkerHeartbeat
	}
	if c.kind == "" {
		c.kind = WorkerSubscriber
	}
}

// Validate reports the first field that is missing or out of range, naming it and its value.
// A zero field counts as its default, as in NewSubscriber.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	if c.Client == nil {
		return errors.New("redisdelay: SubscriberConfig.Client is required")
	}
	if err := validatePrefix(c.KeyPrefix); err != nil {
		return fmt.Errorf("redisdelay: SubscriberConfig.KeyPrefix: %w", err)
	}
	if err := checkName("consumer group", c.ConsumerGroup); err != nil {
		return fmt.Errorf("redisdelay: SubscriberConfig.ConsumerGroup: %w", err)
	}
	if c.LeaseTimeout < 10*time.Millisecond {
		return fmt.Errorf("redisdelay: SubscriberConfig.LeaseTimeout is %s, want at least 10ms", c.LeaseTimeout)
	}
	if c.ClaimBatchSize < 1 || c.ClaimBatchSize > 10000 {
		return fmt.Errorf("redisdelay: SubscriberConfig.ClaimBatchSize is %d, want 1 to 10000", c.ClaimBatchSize)
	}
	if c.RecheckInterval < time.Millisecond {
		return fmt.Errorf("redisdelay: SubscriberConfig.RecheckInterval is %s, want at least 1ms", c.RecheckInterval)
	}
	if c.OperationTimeout < 0 {
		return fmt.Errorf("redisdelay: SubscriberConfig.OperationTimeout is %s, want > 0", c.OperationTimeout)
	}
	if c.MaxAttempts < UnlimitedAttempts {
		return fmt.Errorf("redisdelay: SubscriberConfig.MaxAttempts is %d, want > 0 or UnlimitedAttempts (-1)", c.MaxAttempts)
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return fmt.Errorf("redisdelay: SubscriberConfig.Partitions is %d, want 1 to %d", c.Partitions, MaxPartitions)
	}
	if c.NewGroupWindow > 0 && c.NewGroupWindow < time.Millisecond {
		return fmt.Errorf("redisdelay: SubscriberConfig.NewGroupWindow is %s, want at least 1ms, or negative for none", c.NewGroupWindow)
	}
	if c.WorkerHeartbeat > 0 && c.WorkerHeartbeat < 10*time.Millisecond {
		return fmt.Errorf("redisdelay: SubscriberConfig.WorkerHeartbeat is %s, want at least 10ms, or negative for no worker record", c.WorkerHeartbeat)
	}
	if !c.OnExpired.valid() {
		return fmt.Errorf(`redisdelay: SubscriberConfig.OnExpired is %q, want "dead-letter" (ExpiryActionDeadLetter) or "drop" (ExpiryActionDrop)`, c.OnExpired)
	}
	return nil
}

// ExpiryAction is what a consumer group does with a message it claims for its first attempt
// after the message's deliver-by deadline (SubscriberConfig.OnExpired).
type ExpiryAction string

const (
	// ExpiryActionDeadLetter moves an expired message to the group's dead-letter topic with
	// DeadLetterReasonExpired. It is the default (the zero value means it).
	ExpiryActionDeadLetter ExpiryAction = "dead-letter"
	// ExpiryActionDrop acknowledges an expired message without handing it out: the group is
	// done with it, as if a handler had acked it (Inspector.Status reports it acked).
	ExpiryActionDrop ExpiryAction = "drop"
)

// valid reports whether a is an ExpiryAction the Subscriber knows, "" included.
func (a ExpiryAction) valid() bool {
	return a == "" || a == ExpiryActionDeadLetter || a == ExpiryActionDrop
}
