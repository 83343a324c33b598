package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// store.go owns the Store value: its client, its options, and the copies of it that change how
// calls run.

// Store sends the queue's commands to one Redis (a server, a Cluster or miniredis) under one key
// prefix. It is a small value, safe to copy and for concurrent use; copies share what they learn
// of the server.
type Store struct {
	client redis.UniversalClient
	keys   keySpace
	// shebang records whether the server accepts script flags; shared by copies of the store.
	shebang *shebangSupport
	// contextTimeouts is whether the client bounds calls by their context (see bounded).
	contextTimeouts bool
	// direct makes every call run on the caller's goroutine even when the client does not bound
	// it by its context: for a caller that bounds the wait itself (see Directly).
	direct bool
	opts   Options
}

// Options are what a Store's owner sets once.
type Options struct {
	// DurableReplicas, when > 0, makes Publish WAIT for that many replicas, DurableTimeout at
	// most.
	DurableReplicas int
	DurableTimeout  time.Duration
	// Observe, when set, is called with each script call's name and duration.
	Observe func(script string, took time.Duration)
}

// New returns the store of client under key prefix prefix.
func New(client redis.UniversalClient, prefix string, opts Options) Store {
	return Store{
		client:          client,
		keys:            keySpace{prefix: prefix, cache: newKeyCache()},
		shebang:         &shebangSupport{},
		contextTimeouts: honoursContextDeadlines(client),
		opts:            opts,
	}
}

// Directly returns a copy of s whose calls all run on the caller's goroutine, for a caller that
// bounds the wait itself (a round of groupcommit.Committer frees its slot at its deadline),
// which saves a goroutine and a hand-off per call.
func (s Store) Directly() Store {
	s.direct = true
	return s
}

// Reopened returns a copy of s over a new client with the options of s's client, and a function
// that closes that client, when the client is a *redis.Client or *redis.ClusterClient; ok is
// false otherwise. Applications often close the Redis client before the Subscriber
// (watermill-redisstream closes the client it is given); the last acks and releases then go
// over this client, so that an acked message does not come back.
func (s Store) Reopened() (_ Store, closeClient func() error, ok bool) {
	switch c := s.client.(type) {
	case *redis.Client:
		s.client = redis.NewClient(c.Options())
	case *redis.ClusterClient:
		s.client = redis.NewClusterClient(c.Options())
	default:
		return s, nil, false
	}
	return s, s.client.Close, true
}

// honoursContextDeadlines reports whether client has go-redis's ContextTimeoutEnabled.
func honoursContextDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// WakeChannel is the Pub/Sub channel on which group g's subscriptions are woken: the scripts
// publish a new earliest due time there, or 0 for "check now".
func (s Store) WakeChannel(g Group) string { return s.keys.group(g).wakeChannel }

// CheckNow sends a "check now" (0) on the wake channel of each of groups, in one pipeline of
// classic PUBLISH commands (a single Redis node): a sleeping subscription of the group claims at
// once, and one that waits for its handler extends its leases. The test kit sends it each time
// it moves its virtual clock.
func (s Store) CheckNow(ctx context.Context, groups []Group) error {
	pipe := s.client.Pipeline()
	for _, g := range groups {
		pipe.Publish(ctx, s.WakeChannel(g), "0")
	}
	_, err := pipe.Exec(ctx)
	return err
}
