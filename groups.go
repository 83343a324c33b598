package redisdelay

// This file owns the Publisher's cache of the consumer groups registered on each topic.

import (
	"context"
	"errors"
	"sync"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// groupCache remembers which consumer groups are registered on each topic, so that a publish
// can name every group's keys in KEYS, as Redis Cluster requires. The publish scripts refuse a
// stale view without writing anything and return the current groups; groups are only ever
// added, so a view needs refreshing at most once per new group. It holds at most
// maxCachedTopics topics; past that it starts again from empty, which costs one refresh per
// topic.
type groupCache struct {
	mu     sync.Mutex
	groups map[store.Partition][]string
}

const (
	// maxStaleRetries bounds the refreshes of one publish; each is caused by a new group.
	maxStaleRetries = 5
	// maxCachedTopics bounds the memory of a groupCache.
	maxCachedTopics = 10000
)

// withGroups calls try with the cached view of partition p's groups until it succeeds, fails
// otherwise, or the view was refreshed maxStaleRetries times. No groups means none is
// registered: the messages are then parked for the first group that registers.
func (c *groupCache) withGroups(ctx context.Context, p store.Partition, try func(ctx context.Context, groups []string) error) error {
	c.mu.Lock()
	groups := c.groups[p]
	c.mu.Unlock()
	for refreshes := 0; ; refreshes++ {
		err := try(ctx, groups)
		var stale *store.StaleGroupsError
		if errors.As(err, &stale) && refreshes < maxStaleRetries {
			groups = stale.Groups
			continue
		}
		if err == nil {
			c.mu.Lock()
			if c.groups == nil || len(c.groups) >= maxCachedTopics {
				c.groups = map[store.Partition][]string{}
			}
			c.groups[p] = groups
			c.mu.Unlock()
		}
		return err
	}
}

// forget drops the cached view of the groups of topic's partitions, after a group was removed.
func (c *groupCache) forget(topic string, partitions int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := 0; n < partitions; n++ {
		delete(c.groups, store.Partition{Topic: topic, N: n})
	}
}
