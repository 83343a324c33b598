package wake

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// wakeEventTimeout bounds every wait for a hub event in these tests.
const wakeEventTimeout = 5 * time.Second

// TestWakeWatcherIsReadyOnlyOnceRedisConfirmedItsChannel holds back what Redis sends to the hub
// while the hub subscribes a second channel: although Redis has subscribed it, neither of its
// watchers is ready until the confirmation reaches the hub, while a new watcher of the channel
// confirmed before is ready at once. The confirmation wakes the watchers (due 0).
func TestWakeWatcherIsReadyOnlyOnceRedisConfirmedItsChannel(t *testing.T) {
	for name, addr := range map[string]string{"miniredis": miniredis.RunT(t).Addr(), "redis": redistest.Start(t, redistest.Options{}).Addr} {
		t.Run(name, func(t *testing.T) {
			proxy := newHoldingProxy(t, addr)
			direct := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = direct.Close() })
			hub := newTestHub(t, redis.NewClient(&redis.Options{Addr: proxy.addr()}))

			confirmed := hub.Watch("wake:a")
			waitReady(t, confirmed)
			proxy.hold()

			first := hub.Watch("wake:b")
			second := hub.Watch("wake:b")
			again := hub.Watch("wake:a")
			assert.True(t, isReady(again), "a new watcher of a confirmed channel is ready at once")
			require.Eventually(t, func() bool { return serverSubscribers(direct, "wake:b") == 1 }, wakeEventTimeout, 5*time.Millisecond,
				"Redis never subscribed the hub to wake:b")
			assert.False(t, isReady(first), "ready before the hub read Redis's confirmation")
			assert.False(t, isReady(second), "the second watcher of an unconfirmed channel is ready")

			proxy.release()
			for _, wu := range []*Watch{first, second} {
				waitReady(t, wu)
				assert.Zero(t, receiveDue(t, wu), "the confirmation wakes the watcher to check now")
			}
		})
	}
}

// channelOf names the wake channel of a topic as the store does in its form that matters here:
// the topic's hash tag first, so that on a Redis Cluster the channel is in the topic's slot.
func channelOf(topic string) string { return "{" + topic + "}:wake" }

// publishDue announces due on channel as the scripts do (lua/lib/wake.lua): SPUBLISH, or
// PUBLISH where Redis refuses it.
func publishDue(t *testing.T, client redis.UniversalClient, channel string, due int64) {
	t.Helper()
	ctx := context.Background()
	payload := strconv.FormatInt(due, 10)
	err := client.SPublish(ctx, channel, payload).Err()
	var redisErr redis.Error
	if errors.As(err, &redisErr) {
		err = client.Publish(ctx, channel, payload).Err()
	}
	require.NoError(t, err)
}

// assertWakes announces a due time a minute from now on channel and checks that wu, a watcher
// of channel, receives exactly that due time.
func assertWakes(t *testing.T, client redis.UniversalClient, channel string, wu *Watch) {
	t.Helper()
	drainDue(wu)
	due := time.Now().Add(time.Minute).UnixMicro()
	publishDue(t, client, channel, due)
	assert.Equal(t, due, receiveDue(t, wu), "the wake-up carries the due time")
}

func newTestHub(t *testing.T, client redis.UniversalClient) *Hub {
	hub := NewHub(client, watermill.NopLogger{})
	t.Cleanup(func() {
		hub.Close()
		_ = client.Close()
	})
	return hub
}

func hubMode(w *Hub) pubsubMode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mode
}

func isReady(wu *Watch) bool {
	select {
	case <-wu.ready:
		return true
	default:
		return false
	}
}

func waitReady(t *testing.T, wu *Watch) {
	t.Helper()
	select {
	case <-wu.ready:
	case <-time.After(wakeEventTimeout):
		t.Fatalf("watcher not ready within %s", wakeEventTimeout)
	}
}

func receiveDue(t *testing.T, wu *Watch) int64 {
	t.Helper()
	select {
	case due := <-wu.due:
		return due
	case <-time.After(wakeEventTimeout):
		t.Fatalf("no wake-up within %s", wakeEventTimeout)
		return 0
	}
}

func drainDue(wu *Watch) {
	select {
	case <-wu.due:
	default:
	}
}

// serverSubscribers counts the subscribers of channel, sharded (where Redis has it) or
// classic, as Redis sees them.
func serverSubscribers(client *redis.Client, channel string) int64 {
	ctx := context.Background()
	n := client.PubSubNumSub(ctx, channel).Val()[channel]
	if sharded, err := client.PubSubShardNumSub(ctx, channel).Result(); err == nil {
		n += sharded[channel]
	}
	return n
}
