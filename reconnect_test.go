//go:build !race

// Watermill's tests.TestReconnect appends to a slice in one goroutine and reads it in another
// without synchronisation, so the race detector fails it whatever the Pub/Sub does. It is built
// only without -race; .ci/run runs it as "go test -count=1 -run TestReconnect ."

package redisdelay_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestReconnect runs Watermill's reconnect test: Redis (with AOF, appendfsync always) is killed
// with SIGKILL and restarted twice while 100 publishers send 10,000 messages.
func TestReconnect(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, Supervise: true})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 120})
	t.Cleanup(func() { _ = client.Close() })
	b := backend{name: "redis", client: client}
	features := universalFeatures
	features.RestartServiceCommand = srv.CrashCommand()
	ps, _ := universalConstructors(b)
	tests.TestReconnect(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, ps)
}
