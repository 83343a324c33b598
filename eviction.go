package redisdelay

// This file owns the check that Redis does not evict keys (maxmemory-policy).

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// evictionGuard refuses to work on a Redis that evicts keys. It owns the outcome of the check,
// which is made once, on first use: an evicting policy deletes scheduled messages, leases and
// group registrations without a trace, so it is an error (ErrEvictingRedis) unless the config
// allows it. A check that cannot reach Redis is made again on the next use.
type evictionGuard struct {
	store  store.Store
	allow  bool
	logger watermill.LoggerAdapter

	mu   sync.Mutex
	done bool
	err  error
}

// settled reports whether check has its answer already, with no Redis call to make: then it
// returns at once, nil.
func (g *evictionGuard) settled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done && g.err == nil
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
	policy, err := g.store.MaxmemoryPolicy(ctx)
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		// Managed Redis often forbids CONFIG; the operator is responsible for the policy there.
		g.logger.Info("Cannot read maxmemory-policy (CONFIG GET refused); make sure it is noeviction", watermill.LogFields{"err": err.Error()})
	case err != nil:
		return fmt.Errorf("redisdelay: read maxmemory-policy: %w", err)
	case policy == store.NoEviction:
	case g.allow:
		// Watermill's LoggerAdapter has no warn level; Error is the level above Info.
		g.logger.Error("Redis evicts keys and AllowEvictingRedis is set: scheduled messages can be lost silently", ErrEvictingRedis, watermill.LogFields{"maxmemory_policy": policy})
	default:
		g.err = fmt.Errorf("redisdelay: %w: maxmemory-policy is %q; set it to %q (CONFIG SET maxmemory-policy noeviction, or in redis.conf), or set AllowEvictingRedis", ErrEvictingRedis, policy, store.NoEviction)
	}
	g.done = true
	return g.err
}
