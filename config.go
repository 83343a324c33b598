package redisdelay

// This file owns the defaults and the Publisher's config, its defaults and its Validate rules;
// the Subscriber's config and BatchConfig are in config_subscriber.go, the Inspector's in
// inspector.go. They must agree on KeyPrefix, Partitions and the Marshaler.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

const (
	// DefaultKeyPrefix is the namespace put before every Redis key and channel when KeyPrefix is
	// empty.
	DefaultKeyPrefix = "redisdelay:"
	// DefaultConsumerGroup is the consumer group of a Subscriber whose ConsumerGroup is empty.
	DefaultConsumerGroup = "default"
	// DefaultLeaseTimeout is the lease (visibility timeout) when LeaseTimeout is zero.
	DefaultLeaseTimeout = 30 * time.Second
	// DefaultClaimBatchSize is the most messages one claim takes when ClaimBatchSize is zero.
	DefaultClaimBatchSize = 100
	// DefaultRecheckInterval is the longest an idle subscription sleeps without asking Redis,
	// when RecheckInterval is zero. It only bounds the delay after a lost wake-up.
	DefaultRecheckInterval = 10 * time.Second
	// DefaultOperationTimeout bounds each Redis call when OperationTimeout is zero.
	DefaultOperationTimeout = 5 * time.Second
	// DefaultDurableTimeout is how long a durable publish waits for replicas when
	// DurableTimeout is zero.
	DefaultDurableTimeout = time.Second
	// DefaultMaxMessageBytes is the largest marshaled message Publish accepts when
	// MaxMessageBytes is zero: 1 MiB.
	DefaultMaxMessageBytes = 1 << 20
	// MaxPartitions is the most partitions a topic may have.
	MaxPartitions = 1024
	// DefaultMaxAttempts is how many deliveries a message gets in a consumer group before it
	// becomes a dead letter, when MaxAttempts is zero.
	DefaultMaxAttempts = 25
	// UnlimitedAttempts as MaxAttempts means a message is delivered until it is acked and never
	// becomes a dead letter.
	UnlimitedAttempts = -1
	// DefaultCompactHorizon is the compact tier's horizon when PublisherConfig.CompactHorizon
	// is zero.
	DefaultCompactHorizon = time.Hour
	// MinCompactHorizon and MaxCompactHorizon bound PublisherConfig.CompactHorizon. A bucket
	// entry keeps its due time as a 5-byte offset in µs from the bucket's start, so a bucket
	// spans at most 2^40 µs (about 12.7 days).
	MinCompactHorizon = time.Minute
	MaxCompactHorizon = store.MaxHorizon
	// DefaultWorkerHeartbeat is how often a Subscriber refreshes its worker record when
	// SubscriberConfig.WorkerHeartbeat is zero; the record expires WorkerRecordLifetimes times
	// that after its last refresh.
	DefaultWorkerHeartbeat = 5 * time.Second
	// WorkerRecordLifetimes is how many heartbeat intervals a worker record outlives its last
	// refresh on the Redis clock: a worker that died is gone from Inspector.Workers within
	// that.
	WorkerRecordLifetimes = 3
	// DefaultNewGroupWindow is the new-group window when NewGroupWindow is zero.
	DefaultNewGroupWindow = time.Minute
	// NewGroupWindowMaxMessages caps the messages a topic partition keeps for its new-group
	// window: a publish that would keep more while a group is registered closes the window
	// early, and a first group that finds more parked opens none.
	NewGroupWindowMaxMessages = 10000
)

// DefaultNackBackoff is the backoff of a Subscriber whose NackBackoff is nil: 1 s after the
// first failed attempt, doubling up to 5 minutes, each step spread by ±20 %.
var DefaultNackBackoff Backoff = ExponentialBackoff{
	InitialInterval:     time.Second,
	MaxInterval:         5 * time.Minute,
	Multiplier:          2,
	RandomizationFactor: 0.2,
}

// PublisherConfig configures a Publisher. The zero value of every field but Client means its
// documented default.
type PublisherConfig struct {
	// Client is the Redis connection: a *redis.Client, a *redis.ClusterClient or any other
	// redis.UniversalClient. Required. Close never closes it.
	Client redis.UniversalClient
	// KeyPrefix is put before every key and channel; DefaultKeyPrefix when empty. It must not
	// contain '{' or '}'. Publishers and subscribers of a topic must use the same prefix.
	KeyPrefix string
	// Marshaler encodes messages; DefaultMarshalerUnmarshaler when nil.
	Marshaler Marshaler
	// OperationTimeout bounds one Publish call, its Redis round trips included;
	// DefaultOperationTimeout when zero. It holds even when Redis does not answer at all.
	OperationTimeout time.Duration
	// MaxMessageBytes is the largest marshaled message (UUID, metadata and payload) Publish
	// accepts; DefaultMaxMessageBytes when zero. A larger message is refused with a
	// *MessageError and nothing of its batch is stored.
	MaxMessageBytes int
	// Partitions splits every topic into this many partitions, each with its own hash tag, so
	// that on Redis Cluster one busy topic spreads over the masters. 1 when zero. Publishers and
	// subscribers of a topic must agree on it. Order (equal due times in publish order) holds
	// within a partition.
	Partitions int
	// DurableReplicas makes each publish wait until this many replicas have its messages (the
	// WAIT command, on the connection that ran the publish script), for at most DurableTimeout,
	// and fail with ErrNotDurable otherwise. Replication is asynchronous, so without it a
	// failover can lose publishes that already returned nil. 0 (the default) does not wait.
	// It needs a *redis.Client or a *redis.ClusterClient.
	DurableReplicas int
	// DurableTimeout bounds the wait for replicas; DefaultDurableTimeout when zero. It must be
	// shorter than OperationTimeout.
	DurableTimeout time.Duration
	// PartitionKey is a metadata key whose value picks a message's partition (FNV-1a hash modulo
	// Partitions), so that related messages share a partition and keep their order. A message
	// with a key (KeyMetadataKey) goes to its key's partition instead, so that the Inspector
	// finds it by the key. Other messages go round-robin, one Publish call to one partition.
	PartitionKey string
	// AllowEvictingRedis lets the Publisher work on a Redis whose maxmemory-policy evicts keys.
	// By default the first Publish reads the policy (CONFIG GET maxmemory-policy) and refuses
	// with ErrEvictingRedis unless it is noeviction, because eviction deletes scheduled
	// messages silently. When set, the policy is logged once instead, at Error level
	// (Watermill's LoggerAdapter has no warn level). Where CONFIG is not allowed (managed
	// Redis), the check is logged at info level and skipped.
	AllowEvictingRedis bool
	// Metrics receives this Publisher's publishes and script durations (see Metrics); none
	// when nil. metrics.New, in the metrics package, gives the Prometheus ones.
	Metrics Metrics
	// Batching configures keyed batching per topic: messages published to such a topic with a
	// batch key (WithBatchKey) join that key's open batch, released as one message (see
	// BatchConfig and UnpackBatch). A batch key on another topic is refused.
	Batching map[string]BatchConfig
	// OnDuplicate decides what Publish does with a message whose key (see WithKey) is taken;
	// KeepExisting when empty. OnDuplicateMetadataKey overrides it per message.
	OnDuplicate DuplicatePolicy
	// KeyRetention keeps a history of each keyed message for this long after every consumer
	// group is done with it (acked, dead-lettered or cancelled): Inspector.Status reports it,
	// and the key stays taken, so a message published with it again is a Duplicate whatever
	// the policy. The history is a Redis hash per key that expires by itself (PEXPIRE), about
	// 100 bytes plus the key and group names. 0 (the default) keeps none: the key is free as
	// soon as the message is done. Done means done in every registered group, whether the
	// new-group window is open or not: the window's copies hold no key (docs/guarantees.md,
	// "Keys and the window"). Millisecond precision.
	KeyRetention time.Duration
	// DebounceMaxWait caps the debounce of KeepLater messages (see KeepLater): while its key
	// is republished, a keep-later message is due no later than DebounceMaxWait after the first
	// publish that asked for a cap, on the Redis clock. DebounceMaxWaitMetadataKey overrides it
	// per message. 0 (the default) sets no cap: each later publish can push the message further.
	// It applies to keep-later messages only; µs precision, at least 1µs when set. Each capped
	// key costs one small Redis string that expires by itself DebounceMaxWait after its cap.
	DebounceMaxWait time.Duration
	// DeliverWithin gives the messages published to a topic a deliver-by deadline relative to
	// their due time: a message without a deadline of its own (DeliverByMetadataKey or
	// DeliverWithinMetadataKey) is stored with DeliverWithinMetadataKey set to the topic's
	// window, so that a consumer group that claims it for its first attempt more than the
	// window after its due time (both on the Redis clock) expires it instead of handing it out
	// (SubscriberConfig.OnExpired). Batch items get none (a released batch has no deadline).
	// Microsecond precision, at least 1µs; a topic not in the map gets no deadline.
	DeliverWithin map[string]time.Duration
	// CompactHorizon is how far ahead a message must fall due to wait in the compact tier
	// (docs/how-it-works.md): a time bucket of this width per consumer group, a Redis list
	// whose entries cost a few bytes beyond the marshaled message, instead of the group's due
	// set (a sorted-set entry, about 120 bytes of Redis bookkeeping). A bucket covers
	// [S, S+CompactHorizon) with S a multiple of CompactHorizon (Unix time on the Redis
	// clock) and takes a message when S is at least CompactHorizon after now, so messages due
	// between one and two horizons ahead go to the due set at once. The subscribers' claims move
	// a bucket into the due set from CompactHorizon before its start, at most 500 messages per
	// claim, so delivery times and order are those of the due set. Messages with a key
	// (WithKey, batches) always go to the due set, since their key operations find them there.
	// DefaultCompactHorizon when zero; negative turns the tier off for this Publisher. Else
	// from MinCompactHorizon to MaxCompactHorizon. Publishers of one topic may differ.
	CompactHorizon time.Duration
}

// validateCompactHorizon reports a PublisherConfig.CompactHorizon out of range (0 counts as
// its default).
func validateCompactHorizon(h time.Duration) error {
	if h > 0 && (h < compactHorizonFloor || h > MaxCompactHorizon) {
		return fmt.Errorf("redisdelay: PublisherConfig.CompactHorizon is %s, want negative (off) or %s to %s", h, MinCompactHorizon, MaxCompactHorizon)
	}
	return nil
}

// compactHorizonFloor is MinCompactHorizon, lowered by the package's tests so that they can
// watch buckets move in real time.
var compactHorizonFloor = MinCompactHorizon

func (c *PublisherConfig) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Marshaler == nil {
		c.Marshaler = DefaultMarshalerUnmarshaler{}
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.DurableTimeout == 0 {
		c.DurableTimeout = DefaultDurableTimeout
	}
	if c.CompactHorizon == 0 {
		c.CompactHorizon = DefaultCompactHorizon
	}
}

// Validate reports the first field that is missing or out of range, naming it and its value.
// A zero field counts as its default, as in NewPublisher.
func (c PublisherConfig) Validate() error {
	c.setDefaults()
	if c.Client == nil {
		return errors.New("redisdelay: PublisherConfig.Client is required")
	}
	if err := validatePrefix(c.KeyPrefix); err != nil {
		return fmt.Errorf("redisdelay: PublisherConfig.KeyPrefix: %w", err)
	}
	if c.OperationTimeout < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.OperationTimeout is %s, want > 0", c.OperationTimeout)
	}
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.MaxMessageBytes is %d, want > 0", c.MaxMessageBytes)
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return fmt.Errorf("redisdelay: PublisherConfig.Partitions is %d, want 1 to %d", c.Partitions, MaxPartitions)
	}
	for topic, b := range c.Batching {
		if err := b.validate(topic); err != nil {
			return err
		}
	}
	if c.OnDuplicate.scriptCode() == "" {
		return fmt.Errorf(`redisdelay: PublisherConfig.OnDuplicate is %q, want "keep", "replace", "keep-earlier" or "keep-later"`, c.OnDuplicate)
	}
	if c.KeyRetention < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.KeyRetention is %s, want >= 0", c.KeyRetention)
	}
	if c.DebounceMaxWait != 0 && c.DebounceMaxWait < time.Microsecond {
		return fmt.Errorf("redisdelay: PublisherConfig.DebounceMaxWait is %s, want 0 (no cap) or at least 1µs", c.DebounceMaxWait)
	}
	if err := checkAhead(c.DebounceMaxWait); err != nil {
		return fmt.Errorf("redisdelay: PublisherConfig.DebounceMaxWait is %s: %w", c.DebounceMaxWait, err)
	}
	if err := validateDeliverWithin(c.DeliverWithin); err != nil {
		return err
	}
	if err := validateCompactHorizon(c.CompactHorizon); err != nil {
		return err
	}
	return c.validateDurable()
}

// validateDurable reports DurableReplicas and DurableTimeout out of range, or a client that
// cannot wait for replicas.
func (c PublisherConfig) validateDurable() error {
	if c.DurableReplicas < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.DurableReplicas is %d, want >= 0", c.DurableReplicas)
	}
	if c.DurableReplicas > 0 {
		if !store.CanWaitForReplicas(c.Client) {
			return fmt.Errorf("redisdelay: PublisherConfig.DurableReplicas needs a *redis.Client or *redis.ClusterClient, not %T", c.Client)
		}
		if c.DurableTimeout <= 0 || c.DurableTimeout >= c.OperationTimeout {
			return fmt.Errorf("redisdelay: PublisherConfig.DurableTimeout is %s, want > 0 and shorter than OperationTimeout %s", c.DurableTimeout, c.OperationTimeout)
		}
	}
	return nil
}

func validatePrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("%q contains '{' or '}', which would break the Redis Cluster hash tag", prefix)
	}
	return nil
}

// BatchConfig configures batching on a topic. MaxItems and MaxWait are required.
type BatchConfig struct {
	// MaxItems releases a batch when it holds this many items.
	MaxItems int
	// MaxWait releases a batch this long after its first item, on the Redis clock;
	// microsecond precision, at least 1 ms, at most MaxDelay.
	MaxWait time.Duration
	// MaxBytes releases a batch when its items' marshaled bytes reach it; MaxBatchBytes when
	// zero, and at most MaxBatchBytes.
	MaxBytes int
}

// MaxBatchBytes is the most bytes of marshaled items a batch collects (BatchConfig.MaxBytes,
// and its value when zero): a batch that reaches it is released (BatchTriggerSize). Adding an
// item costs O(item) in Redis, but closing a batch copies it once inside Redis (about 1 ms of
// Redis time per MiB), and a subscriber receives it as one message.
const MaxBatchBytes = 1 << 20

func (c BatchConfig) validate(topic string) error {
	if c.MaxItems < 1 || c.MaxWait < time.Millisecond || c.MaxBytes < 0 || c.MaxBytes > MaxBatchBytes {
		return fmt.Errorf("redisdelay: PublisherConfig.Batching[%s] is %+v, want MaxItems >= 1, MaxWait >= 1ms and 0 <= MaxBytes <= %d (MaxBatchBytes)", quote(topic), c, MaxBatchBytes)
	}
	if err := checkAhead(c.MaxWait); err != nil {
		return fmt.Errorf("redisdelay: PublisherConfig.Batching[%s].MaxWait is %s: %w", quote(topic), c.MaxWait, err)
	}
	return nil
}

// maxBytes is MaxBytes, or MaxBatchBytes when it is zero.
func (c BatchConfig) maxBytes() int {
	if c.MaxBytes == 0 {
		return MaxBatchBytes
	}
	return c.MaxBytes
}

const (
	// A publish call's token is kept for publishCallTTLFactor times OperationTimeout, and at
	// least minPublishCallTTL. go-redis starts no retry of a call after its context ended, so
	// every run of a call is sent within OperationTimeout; the margin covers runs that wait in a
	// slow server's queue.
	publishCallTTLFactor = 4
	minPublishCallTTL    = 10 * time.Second
)
