package redisdelay

import (
	"context"
	"errors"
	"sync"
)

// groupCache remembers which consumer groups are registered on each topic, so that a publish
// can name every group's keys in KEYS, as Redis Cluster requires. The publish scripts refuse a
// stale view without writing anything and return the current groups; groups are only ever
// added, so a view needs refreshing at most once per new group.
type groupCache struct {
	mu     sync.Mutex
	groups map[string][]string
}

// maxStaleRetries bounds the refreshes of one publish; each is caused by a new group.
const maxStaleRetries = 5

// publish calls try with the cached view of topic's groups (expected count, groups to schedule
// for) until it succeeds, fails otherwise, or the view was refreshed maxStaleRetries times.
// With no groups registered, try gets the default group and an expected count of 0.
func (c *groupCache) publish(ctx context.Context, topic string, try func(ctx context.Context, expected int, groups []string) error) error {
	c.mu.Lock()
	if c.groups == nil {
		c.groups = map[string][]string{}
	}
	groups := c.groups[topic]
	c.mu.Unlock()
	for refreshes := 0; ; refreshes++ {
		expected, target := len(groups), groups
		if expected == 0 {
			target = []string{DefaultConsumerGroup}
		}
		err := try(ctx, expected, target)
		var stale *errStaleGroups
		if errors.As(err, &stale) && refreshes < maxStaleRetries {
			groups = stale.groups
			continue
		}
		if err == nil {
			c.mu.Lock()
			c.groups[topic] = target
			c.mu.Unlock()
		}
		return err
	}
}
