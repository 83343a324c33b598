// Package seam is the one way from package schedule into a *redisdelay.Publisher and a
// *redisdelay.Inspector: the root package implements Publisher and Inspector and sets the hooks
// in an init func (as internal/clock's Inject does for the test kit), so that the Scheduler is a
// client of the Publisher's commit path, with its groups, partitions, fencing, outcomes and
// metrics, without copying it and without a public API for it.
package seam

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// PublishOptions are a Publish call's settings that differ from the Publisher's config: the
// Scheduler's tick messages. The zero value commits as Publisher.Publish does.
type PublishOptions struct {
	// At is the due time of each message (absolute; due at once if past), in the order of the
	// messages, instead of its delay metadata; nil for the delay metadata.
	At []time.Time
	// KeyRetention, when > 0, gives every keyed message the duplicate policy KeepExisting and
	// this key retention instead of PublisherConfig.OnDuplicate and KeyRetention.
	KeyRetention time.Duration
	// NotAfterUs, when > 0, fences each script call on the Redis clock: a call that reaches
	// Redis after this Unix time in µs stores nothing and fails with an error wrapping
	// store.ErrTooLate. A fenced call does not share a group commit round.
	NotAfterUs int64
}

// SubscriberOptions are the settings of a Subscriber made from a Publisher's layout (its
// client, key prefix, operation timeout and metrics).
type SubscriberOptions struct {
	ConsumerGroup, Consumer string
	LeaseTimeout            time.Duration
	// NackDelay is the constant backoff after a nack; attempts are unlimited.
	NackDelay time.Duration
	// ClaimBatchSize is how many messages one claim takes.
	ClaimBatchSize int
	// Kind is the kind of worker the Subscriber records (redisdelay.WorkerKind's value, such as
	// "scheduler"); "" for a plain subscriber.
	Kind string
	// WorkerHeartbeat is SubscriberConfig.WorkerHeartbeat: how often its worker record is
	// refreshed (0: the default; negative: no record).
	WorkerHeartbeat time.Duration
}

// Publisher is what package schedule uses of a *redisdelay.Publisher.
type Publisher interface {
	// Check prepares msg for topic as Publish would and returns its error (a
	// *redisdelay.MessageError), storing nothing.
	Check(topic string, msg *message.Message) error
	// Marshal marshals msg for topic as Publish would, refusing one over MaxMessageBytes.
	Marshal(topic string, msg *message.Message) ([]byte, error)
	// Publish publishes msgs on topic through the Publisher's commit path (groups, partitions,
	// outcomes, metrics, topic registration), with o's per-call settings, within
	// OperationTimeout of ctx, and returns how many of msgs were not stored because their key
	// was taken (OutcomeDuplicate). Its errors are PublishWithResult's.
	Publish(ctx context.Context, topic string, msgs []*message.Message, o PublishOptions) (duplicates int, err error)
	// Store is the Publisher's Redis layer; WithGroups runs try with the consumer groups of
	// part, again with fresh ones when the script finds them stale.
	Store() store.Store
	WithGroups(ctx context.Context, part store.Partition, try func(ctx context.Context, groups []string) error) error
	// Call returns a new token for a script call that publishes.
	Call() store.Call
	// EnsureTopic registers topic, of that many partitions, once per Publisher; it returns an
	// error when the topic registry holds another number of partitions for it.
	EnsureTopic(ctx context.Context, topic string, partitions int, logger watermill.LoggerAdapter) error
	// KeyPartition is the partition of the topics' messages with key key.
	KeyPartition(key string) int
	// OperationTimeout bounds each call of the Publisher.
	OperationTimeout() time.Duration
	// Client and KeyPrefix are the Publisher's Redis layout.
	Client() redis.UniversalClient
	KeyPrefix() string
	// NewSubscriber returns a Subscriber of the Publisher's layout.
	NewSubscriber(o SubscriberOptions, logger watermill.LoggerAdapter) (message.Subscriber, error)
}

// Inspector is what package schedule uses of a *redisdelay.Inspector.
type Inspector interface {
	// Store is the Inspector's Redis layer.
	Store() store.Store
	// OperationTimeout bounds each call of the Inspector.
	OperationTimeout() time.Duration
	// ListLimit caps the limit of one page as ListOptions.Limit is.
	ListLimit(limit int) int
	// Client and KeyPrefix are the Inspector's Redis layout.
	Client() redis.UniversalClient
	KeyPrefix() string
}

// The hooks, set by package redisdelay in an init func.
var (
	// PublisherOf returns the seam of a *redisdelay.Publisher, or nil for anything else.
	PublisherOf func(p any) Publisher
	// InspectorOf returns the seam of a *redisdelay.Inspector, or nil for anything else.
	InspectorOf func(in any) Inspector
	// CheckName is the root's name check without its "redisdelay: " prefix (wrapping
	// redisdelay.ErrInvalidName).
	CheckName func(kind, name string) error
	// SchedulerPublisher, set by package schedule, returns the *redisdelay.Publisher of a
	// *schedule.Scheduler, or nil for anything else.
	SchedulerPublisher func(s any) any
	// CheckAhead refuses a time more than redisdelay.MaxDelay ahead (wrapping
	// redisdelay.ErrBeyondMaxDelay).
	CheckAhead func(d time.Duration) error
)

// Layout is a Redis client and key prefix: where a Publisher or Inspector keeps its keys.
type Layout interface {
	Client() redis.UniversalClient
	KeyPrefix() string
}

// SameLayout reports whether a and b use the same Redis client and the same key prefix.
func SameLayout(a, b Layout) bool {
	return a.Client() == b.Client() && a.KeyPrefix() == b.KeyPrefix()
}
