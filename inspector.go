package redisdelay

// The Inspector: its config, its constructor, and the helpers its operations share (running
// calls concurrently, resolving refs to members, where a group's dead letters wait). Its
// operations live in files by job: topics.go, inspector_group.go, inspector_key.go,
// inspector_list.go, paging.go, inspector_ref.go, inspector_bulk.go, inspector_forecast.go,
// inspector_workers.go.
//
// Everything the Inspector does uses O(1) or O(log N) commands per topic and group (plus O(M) for
// M listed or moved messages, a list cursor O(log² N)); nothing uses KEYS or SCAN, skips an
// offset, or sends more of a message than a preview unless that one message was asked for.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// InspectorConfig configures an Inspector. The zero value of every field but Client means its
// documented default.
type InspectorConfig struct {
	// Client is the Redis connection, as in PublisherConfig. Required. Close never closes it.
	Client redis.UniversalClient
	// KeyPrefix is the namespace of keys; DefaultKeyPrefix when empty. It must be the one of
	// the topic's publishers and subscribers.
	KeyPrefix string
	// Partitions is the partition count of a topic missing from the topic registry (written by
	// its publishers and subscribers, whose partitions the Inspector uses otherwise), so that a
	// key leads to its partition; 1 when zero.
	Partitions int
	// OperationTimeout bounds each call, its Redis round trips included;
	// DefaultOperationTimeout when zero.
	OperationTimeout time.Duration
	// Metrics receives cancels, reschedules and script durations (see Metrics); none when
	// nil. metrics.New, in the metrics package, gives the Prometheus ones, and its RunSampler
	// the queue-size gauges.
	Metrics Metrics
	// Unmarshaler decodes stored messages for List and Message; DefaultMarshalerUnmarshaler
	// when nil. It must match the publishers' Marshaler.
	Unmarshaler Unmarshaler
}

func (c *InspectorConfig) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.Unmarshaler == nil {
		c.Unmarshaler = DefaultMarshalerUnmarshaler{}
	}
}

// Validate reports the first field that is missing or out of range, naming it and its value.
// A zero field counts as its default, as in NewInspector.
func (c InspectorConfig) Validate() error {
	c.setDefaults()
	if c.Client == nil {
		return errors.New("redisdelay: InspectorConfig.Client is required")
	}
	if err := validatePrefix(c.KeyPrefix); err != nil {
		return fmt.Errorf("redisdelay: InspectorConfig.KeyPrefix: %w", err)
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return fmt.Errorf("redisdelay: InspectorConfig.Partitions is %d, want 1 to %d", c.Partitions, MaxPartitions)
	}
	if c.OperationTimeout < 0 {
		return fmt.Errorf("redisdelay: InspectorConfig.OperationTimeout is %s, want > 0", c.OperationTimeout)
	}
	return nil
}

// Inspector finds and acts on the messages of a queue. Its methods, by job:
//
//   - topics and groups: Topics, Stats, Pause, Resume, RemoveGroup;
//   - one message or open batch, named by a Target (ByKey, ByRef, ByDeadLetter, ByBatchKey):
//     Cancel, Reschedule, RescheduleAfter, RunNow (each an ActionResult), Status, Message;
//   - lists: List (one page per call, each message with the ref that ByRef takes);
//   - dead letters and bulk: Requeue, Purge.
//
// It is a type of its own, not a part of Publisher, because what it acts on is shared by
// every publisher and subscriber of a topic: an operator's tool (a CLI, a dashboard, a support
// script) needs it without publishing anything, and one config serves all its operations. It
// is safe for concurrent use and holds no resources; there is nothing to close.
//
// Each action by key is one atomic Lua script on the topic's hash slot (cluster-safe), in
// O(log N) per consumer group, and names its outcome in every group. A script that the Redis
// client runs twice (a retry after a lost reply) acts once and returns the first run's result.
type Inspector struct {
	config  InspectorConfig
	logger  watermill.LoggerAdapter
	store   store.Store
	groups  groupCache
	callTTL time.Duration
}

// NewInspector returns an Inspector. A nil logger means watermill.NopLogger. It makes no Redis
// call; an invalid config is returned as an error naming the field.
func NewInspector(config InspectorConfig, logger watermill.LoggerAdapter) (*Inspector, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	st := store.New(config.Client, config.KeyPrefix, store.Options{Observe: observeScripts(config.Metrics)})
	return &Inspector{
		config:  config,
		logger:  logger.With(watermill.LogFields{"provider": "redisdelay"}),
		store:   st,
		callTTL: max(publishCallTTLFactor*config.OperationTimeout, minPublishCallTTL),
	}, nil
}

// KeyPrefix returns the key prefix the Inspector reads under (InspectorConfig.KeyPrefix, or
// DefaultKeyPrefix).
func (i *Inspector) KeyPrefix() string { return i.config.KeyPrefix }

// Addr returns the address of the Redis the Inspector reads, for display: the Addr of a
// *redis.Client (go-redis's placeholder "FailoverClient" for one that Sentinel manages), or the
// comma-separated Addrs of a *redis.ClusterClient (the seed addresses) or a *redis.Ring; ""
// for any other client. It holds no user name or password, and makes no Redis call.
func (i *Inspector) Addr() string {
	switch c := i.config.Client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return strings.Join(addrs, ",")
	}
	return ""
}

// forEachConcurrently calls f for 0..n-1, 16 at a time, and returns the first error.
func forEachConcurrently(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- f(ctx, k)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// deadLetterPartition is the partition of group g's default dead-letter topic where its dead
// letters wait.
func deadLetterPartition(g store.Group) store.Partition {
	return store.Partition{Topic: DefaultDeadLetterTopic(g.Topic, g.Name), N: g.N}
}

// wholeMembers returns the members that refs name in set (a due or parked set) of their
// partition: each ref's own member, or the one its short form finds (resolve.lua, resolveChunk
// short forms per call), leaving out short forms that find none.
func (i *Inspector) wholeMembers(ctx context.Context, set store.Set, refs []store.Ref) ([]string, error) {
	var out, shorts []string
	var scores []int64
	resolve := func() error {
		found, err := i.store.Resolve(ctx, set, shorts, scores)
		for _, m := range found {
			if m != "" {
				out = append(out, m)
			}
		}
		shorts, scores = shorts[:0], scores[:0]
		return err
	}
	for _, r := range refs {
		if !r.Short {
			out = append(out, r.Member)
			continue
		}
		shorts, scores = append(shorts, r.Member), append(scores, r.ScoreUs)
		if len(shorts) == resolveChunk {
			if err := resolve(); err != nil {
				return nil, err
			}
		}
	}
	if len(shorts) > 0 {
		if err := resolve(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// wholeMember is wholeMembers for one ref: "" when its short form finds none, which no
// script finds either.
func (i *Inspector) wholeMember(ctx context.Context, set store.Set, r store.Ref) (string, error) {
	found, err := i.wholeMembers(ctx, set, []store.Ref{r})
	if err != nil || len(found) == 0 {
		return "", err
	}
	return found[0], nil
}

// resolveChunk is how many short forms one resolve.lua call finds: each costs O(log² N) and
// copies its member, message included, inside Redis.
const resolveChunk = 64
