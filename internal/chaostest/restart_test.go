//go:build chaos

package chaostest

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// Scenario 3. Redis with AOF (appendfsync always) is killed with SIGKILL under load and comes
// back on the same port with its data, as under a service manager.
func TestRedisKilledUnderLoadLosesNothingAcknowledged(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, Supervise: true})
	logger := newLogger(t.Name())
	topic, group := newTopic(), "chaos"
	probe := newClient(t, srv.Addr)

	var consumers sync.WaitGroup
	l := newLedger()
	subs := make([]*redisdelay.Subscriber, 2)
	for i := range subs {
		subs[i] = newSubscriber(t, newClient(t, srv.Addr), group, logger, nil)
		require.NoError(t, subs[i].SubscribeInitialize(topic))
		ch, err := subs[i].Subscribe(context.Background(), topic)
		require.NoError(t, err)
		consumers.Add(1)
		go func() { defer consumers.Done(); l.consume(ch) }()
	}
	pub := newPublisher(t, newClient(t, srv.Addr), logger, nil)
	run := (&load{
		ledger: l, pub: pub, topic: topic, publishers: 4,
		interval: 5 * time.Millisecond, maxCalls: 10000, maxTime: 2 * time.Minute,
		payload: make([]byte, 100),
	}).start()

	kills := short(2, 5)
	time.Sleep(time.Second)
	var lastBack time.Time
	for i := range kills {
		require.NoError(t, srv.Signal(syscall.SIGKILL), "kill %d", i+1)
		killed := time.Now()
		waitForPing(t, probe, 15*time.Second)
		lastBack = time.Now()
		t.Logf("kill %d: Redis answered again after %s", i+1, lastBack.Sub(killed).Round(time.Millisecond))
		time.Sleep(1500 * time.Millisecond) // load runs against the restarted server
	}
	run.halt()

	missing := l.waitAllStoredDelivered(drainTimeout)
	for _, sub := range subs {
		require.NoError(t, sub.Close())
	}
	consumers.Wait()

	l.report(t, "redis-sigkill-restart")
	t.Logf("adapter logged %d errors over %d kills", logger.Errors(), kills)
	assert.Zero(t, missing, "acknowledged messages still undelivered %s after the load stopped", drainTimeout)
	assert.Positive(t, l.storedSince(lastBack), "no Publish succeeded after the last restart")
}

// waitForPing waits until the restarted server answers PING.
func waitForPing(t *testing.T, c *redis.Client, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not answer PING within %s of the kill: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
