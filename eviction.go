package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// noEviction is the only maxmemory-policy under which Redis never deletes the queue's keys.
const noEviction = "noeviction"

// evictionGuard refuses to work on a Redis that evicts keys. It owns the outcome of the check,
// which is made once, on first use: an evicting policy deletes scheduled messages, leases and
// group registrations without a trace, so it is an error (ErrEvictingRedis) unless the config
// allows it. A check that cannot reach Redis is made again on the next use.
type evictionGuard struct {
	client redis.UniversalClient
	allow  bool
	logger watermill.LoggerAdapter

	mu   sync.Mutex
	done bool
	err  error
}

// check returns nil when the servers do not evict keys (or eviction is allowed, or CONFIG is
// not available), ErrEvictingRedis naming the policy otherwise, or the Redis error when the
// policy could not be read.
func (g *evictionGuard) check(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return g.err
	}
	policy, err := bounded(ctx, honoursContextDeadlines(g.client), g.policy)
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		// Managed Redis often forbids CONFIG; the operator is responsible for the policy there.
		g.logger.Info("Cannot read maxmemory-policy (CONFIG GET refused); make sure it is noeviction", watermill.LogFields{"err": err.Error()})
	case err != nil:
		return fmt.Errorf("redisdelay: read maxmemory-policy: %w", err)
	case policy == noEviction:
	case g.allow:
		// Watermill's LoggerAdapter has no warn level; Error is the level above Info.
		g.logger.Error("Redis evicts keys and AllowEvictingRedis is set: scheduled messages can be lost silently", ErrEvictingRedis, watermill.LogFields{"maxmemory_policy": policy})
	default:
		g.err = fmt.Errorf("redisdelay: %w: maxmemory-policy is %q; set it to %q (CONFIG SET maxmemory-policy noeviction, or in redis.conf), or set AllowEvictingRedis", ErrEvictingRedis, policy, noEviction)
	}
	g.done = true
	return g.err
}

// policy reads maxmemory-policy (CONFIG GET); on a cluster from every master, returning the
// first that evicts, if any.
func (g *evictionGuard) policy(ctx context.Context) (string, error) {
	read := func(ctx context.Context, c *redis.Client) (string, error) {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return "", err
		}
		return res["maxmemory-policy"], nil
	}
	switch c := g.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		worst := noEviction
		err := c.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
			p, err := read(ctx, master)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && p != noEviction {
				worst = p
			}
			return err
		})
		return worst, err
	case *redis.Client:
		return read(ctx, c)
	default:
		res, err := g.client.ConfigGet(ctx, "maxmemory-policy").Result()
		return res["maxmemory-policy"], err
	}
}
