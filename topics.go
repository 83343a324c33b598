package redisdelay

// The topic registry: which topics exist under a key prefix, with their partitions and
// consumer groups. Publishers and subscribers write it (registeredTopics); the Inspector reads
// it (Topics) and finds a topic or group in it for its other operations.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// registeredTopics remembers the partitions that the topic registry holds for each topic a
// Publisher or Subscriber has written to it, so that each is read and written once per
// process. It holds at most maxCachedTopics topics; past that it starts again from empty.
type registeredTopics struct {
	mu   sync.Mutex
	seen map[string]int
}

// known reports whether ensure has nothing to do for topic with partitions: it is in the
// registry with those partitions.
func (r *registeredTopics) known(topic string, partitions int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	registered, ok := r.seen[topic]
	return ok && registered == partitions
}

// ensure writes topic with partitions to the registry unless the topic is there already, and
// returns an error, naming the topic and both counts, when the registry holds other partitions
// for it: its messages would be split between two layouts, and a key would lead to a partition
// its consumers never read. A failure to reach the registry is logged and tried again next
// time, since delivery does not need it.
func (r *registeredTopics) ensure(ctx context.Context, st store.Store, topic string, partitions int, logger watermill.LoggerAdapter) error {
	r.mu.Lock()
	registered, done := r.seen[topic]
	r.mu.Unlock()
	if !done {
		var err error
		if registered, err = st.RegisterTopic(ctx, topic, partitions); err != nil {
			// Info, not Error: on a full Redis every publish would log it, and delivery is fine.
			logger.Info("Cannot add the topic to the topic registry yet; the Inspector finds it through its groups meanwhile", watermill.LogFields{"topic": topic, "err": err.Error()})
			return nil
		}
		r.mu.Lock()
		if r.seen == nil || len(r.seen) >= maxCachedTopics {
			r.seen = map[string]int{}
		}
		r.seen[topic] = registered
		r.mu.Unlock()
	}
	if registered != partitions {
		return fmt.Errorf("redisdelay: topic %s is configured with %d partitions, but the topic registry holds %d for it: %w", quote(topic), partitions, registered, errPartitionsDisagree)
	}
	return nil
}

// errPartitionsDisagree is wrapped by the error of a publisher or subscriber whose partitions
// are not the ones the topic registry holds for the topic.
var errPartitionsDisagree = errors.New("every publisher and subscriber of a topic needs the same Partitions (docs/configuration.md#partitions)")

// forget makes the next ensure of each topic write it again, as after Redis lost its data.
func (r *registeredTopics) forget(topics ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range topics {
		delete(r.seen, t)
	}
}

// TopicInfo describes one topic of the registry.
type TopicInfo struct {
	Topic string
	// Partitions is the partition count its publishers or subscribers were configured with.
	Partitions int
	// Groups are the consumer groups registered on any of its partitions, sorted.
	Groups []string
}

// Topics lists every topic that has been published to or subscribed under the key prefix
// (dead-letter topics included once a subscriber of their source topic started), sorted, with
// its partitions and consumer groups. It reads the topic registry (HGETALL) and each
// partition's group set (SMEMBERS). Errors: the Redis error, within OperationTimeout.
func (i *Inspector) Topics(ctx context.Context) ([]TopicInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, i.config.OperationTimeout)
	defer cancel()
	registry, err := i.store.RegisteredTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: read the topic registry: %w", err)
	}
	out := make([]TopicInfo, 0, len(registry))
	for topic, partitions := range registry {
		out = append(out, TopicInfo{Topic: topic, Partitions: max(partitions, 1)})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Topic < out[b].Topic })
	err = forEachConcurrently(ctx, len(out), func(ctx context.Context, n int) error {
		groups, err := i.groupsOf(ctx, out[n].Topic, out[n].Partitions)
		out[n].Groups = groups
		return err
	})
	return out, err
}

// topic returns the registry entry of topic, or an error wrapping ErrNotFound when it is
// neither in the registry nor has a consumer group.
func (i *Inspector) topic(ctx context.Context, topic string) (TopicInfo, error) {
	if err := ValidateName("topic", topic); err != nil {
		return TopicInfo{}, err
	}
	partitions, registered, err := i.store.RegisteredPartitions(ctx, topic)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("redisdelay: topic %s: %w", quote(topic), err)
	}
	// A topic missing from the registry (its entry was deleted, or its publishers predate it)
	// is still found through its groups, with the configured partitions.
	if !registered {
		partitions = i.config.Partitions
	}
	info := TopicInfo{Topic: topic, Partitions: max(partitions, 1)}
	info.Groups, err = i.groupsOf(ctx, topic, info.Partitions)
	if err == nil && !registered && len(info.Groups) == 0 {
		return TopicInfo{}, fmt.Errorf("redisdelay: topic %s: %w", quote(topic), ErrNotFound)
	}
	return info, err
}

// group returns the registry entry of topic after checking that group is registered on it,
// or an error wrapping ErrInvalidName or ErrNotFound.
func (i *Inspector) group(ctx context.Context, topic, group string) (TopicInfo, error) {
	if err := ValidateName("consumer group", group); err != nil {
		return TopicInfo{}, err
	}
	info, err := i.topic(ctx, topic)
	if err != nil {
		return info, err
	}
	for _, g := range info.Groups {
		if g == group {
			return info, nil
		}
	}
	return info, fmt.Errorf("redisdelay: consumer group %s on topic %s: %w", quote(group), quote(topic), ErrNotFound)
}

// groupOrParked is group, and for ParkedGroup checks that no group is registered on topic:
// then its messages wait in the parked sets. For ParkedGroup on a topic with a group, the
// error wraps ErrNotFound.
func (i *Inspector) groupOrParked(ctx context.Context, topic, group string) (TopicInfo, error) {
	if group != ParkedGroup {
		return i.group(ctx, topic, group)
	}
	info, err := i.topic(ctx, topic)
	if err == nil && len(info.Groups) > 0 {
		err = fmt.Errorf("redisdelay: topic %s has consumer groups, so no message waits parked for a first one: %w", quote(topic), ErrNotFound)
	}
	return info, err
}

// groupsOf returns the union of the groups registered on the partitions of topic, sorted.
func (i *Inspector) groupsOf(ctx context.Context, topic string, partitions int) ([]string, error) {
	set := map[string]bool{}
	for n := 0; n < partitions; n++ {
		groups, err := i.store.Groups(ctx, store.Partition{Topic: topic, N: n})
		if err != nil {
			return nil, fmt.Errorf("redisdelay: groups of topic %s: %w", quote(topic), err)
		}
		for _, g := range groups {
			set[g] = true
		}
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// partitions returns the partitions of topic: the registry's, or InspectorConfig.Partitions
// for a topic missing from it (one HGET).
func (i *Inspector) partitions(ctx context.Context, topic string) (int, error) {
	partitions, registered, err := i.store.RegisteredPartitions(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("redisdelay: topic %s: %w", quote(topic), err)
	}
	if !registered || partitions < 1 {
		return i.config.Partitions, nil
	}
	return partitions, nil
}
