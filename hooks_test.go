package redisdelay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// hook names one counter of a hookRecorder: the hook that adds to it, its topic and consumer
// group, and a detail (a dead-letter reason, an expiry action, a script name).
type hook struct{ name, topic, group, detail string }

// hookRecorder is a redisdelay.Metrics that counts what the core reports, for the tests that
// check when each hook is called.
type hookRecorder struct {
	mu       sync.Mutex
	counts   map[hook]int
	lateness []time.Duration
}

var _ redisdelay.Metrics = (*hookRecorder)(nil)

func newHookRecorder() *hookRecorder { return &hookRecorder{counts: map[hook]int{}} }

func (r *hookRecorder) add(h hook, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[h] += n
}

// count returns what the hooks added to h.
func (r *hookRecorder) count(h hook) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[h]
}

// heard returns every topic and consumer group that a hook was called with.
func (r *hookRecorder) heard() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := map[string]bool{}
	for h := range r.counts {
		names[h.topic], names[h.group] = true, true
	}
	return names
}

// latenesses returns a copy of every lateness Claimed reported.
func (r *hookRecorder) latenesses() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.lateness...)
}

func (r *hookRecorder) Published(topic string, stored, duplicates int) {
	r.add(hook{"published", topic, "", ""}, stored)
	r.add(hook{"deduplicated", topic, "", ""}, duplicates)
}

func (r *hookRecorder) Claimed(topic, group string, lateness []time.Duration) {
	r.add(hook{"claimed", topic, group, ""}, len(lateness))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lateness = append(r.lateness, lateness...)
}

func (r *hookRecorder) LeasesExpired(topic, group string, n int) {
	r.add(hook{"lease_expired", topic, group, ""}, n)
}
func (r *hookRecorder) Acked(topic, group string)  { r.add(hook{"acked", topic, group, ""}, 1) }
func (r *hookRecorder) Nacked(topic, group string) { r.add(hook{"nacked", topic, group, ""}, 1) }
func (r *hookRecorder) DeadLettered(topic, group, reason string) {
	r.add(hook{"dead_lettered", topic, group, reason}, 1)
}
func (r *hookRecorder) Expired(topic, group string, action redisdelay.ExpiryAction) {
	r.add(hook{"expired", topic, group, string(action)}, 1)
}
func (r *hookRecorder) RegistrationLost(topic, group string) {
	r.add(hook{"registration_lost", topic, group, ""}, 1)
}
func (r *hookRecorder) ScriptCalled(script string, took time.Duration) {
	r.add(hook{"script", "", "", script}, 1)
}
func (r *hookRecorder) Cancelled(topic, group string) { r.add(hook{"cancelled", topic, group, ""}, 1) }
func (r *hookRecorder) Rescheduled(topic, group string) {
	r.add(hook{"rescheduled", topic, group, ""}, 1)
}

func TestMetricsHooksHearAKnownWorkload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newHookRecorder()
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Metrics = m })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, Metrics: m}, nil)
		require.NoError(t, err)
		// This subscriber's heartbeat never reaches Redis, so the lease of what it holds expires.
		stuck := newSubscriberOn(t, faultyClient(t, b, scriptFault{match: isExtendCall, around: func(context.Context, redis.Cmder, redis.ProcessHook) error {
			return errors.New("extend dropped by the test")
		}}), func(c *redisdelay.SubscriberConfig) {
			c.Metrics = m
			c.LeaseTimeout = 300 * time.Millisecond
		})
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.Metrics = m
			c.MaxAttempts = 2
		})
		require.NoError(t, sub.SubscribeInitialize(topic))

		// A message held by the stuck subscriber comes back to sub after its lease.
		require.NoError(t, pub.Publish(topic, keyed("k4", 0, "")))
		held := receive(t, subscribe(t, stuck, topic), 5*time.Second)
		require.Equal(t, "k4", held.Metadata.Get(redisdelay.KeyMetadataKey))

		var msgs []*message.Message
		for _, k := range []string{"k0", "k1", "k2", "k3"} {
			msgs = append(msgs, keyed(k, 0, ""))
		}
		msgs = append(msgs, keyed("k0", 0, ""), keyed("later", time.Hour, ""), keyed("soon", time.Hour, ""))
		require.NoError(t, pub.Publish(topic, msgs...))

		// k0, k1, k2 and k4 are acked; k3 is nacked on both its attempts and becomes a dead letter.
		ch := subscribe(t, sub, topic)
		for range 6 {
			msg := receive(t, ch, 5*time.Second)
			if msg.Metadata.Get(redisdelay.KeyMetadataKey) == "k3" {
				msg.Nack()
			} else {
				msg.Ack()
			}
		}

		_, err = in.Cancel(context.Background(), topic, redisdelay.ByKey("later"))
		require.NoError(t, err)
		_, err = in.RunNow(context.Background(), topic, redisdelay.ByKey("soon"))
		require.NoError(t, err)
		receive(t, ch, 5*time.Second).Ack()

		group := redisdelay.DefaultConsumerGroup
		// Acks are reported by the subscription once it sees them, a moment after Ack returns.
		require.Eventually(t, func() bool {
			return m.count(hook{"dead_lettered", topic, group, redisdelay.DeadLetterReasonNacked}) == 1 &&
				m.count(hook{"acked", topic, group, ""}) == 5
		}, 5*time.Second, 5*time.Millisecond)
		assert.Equal(t, 7, m.count(hook{"published", topic, "", ""}), "k4, then 6 distinct keys")
		assert.Equal(t, 1, m.count(hook{"deduplicated", topic, "", ""}))
		for name, want := range map[string]int{
			"claimed":       8, // k0 k1 k2, k3 twice, k4 twice (once by each subscriber), soon.
			"acked":         5,
			"nacked":        2,
			"lease_expired": 1,
			"cancelled":     1,
			"rescheduled":   1,
		} {
			assert.Equal(t, want, m.count(hook{name, topic, group, ""}), name)
		}
		late := m.latenesses()
		assert.Len(t, late, 8, "one lateness per claimed message")
		for _, d := range late {
			assert.True(t, d >= 0 && d < 5*time.Second, "lateness %s", d)
		}
		assert.Positive(t, m.count(hook{"script", "", "", "claim"}), "script calls are timed")
		held.Ack() // refused: its lease was lost
	})
}

func isExtendCall(keys []string) bool { return len(keys) == 1 && strings.HasSuffix(keys[0], ":lease") }

// newSubscriberOn returns a Subscriber on client, closed when the test ends.
func newSubscriberOn(t *testing.T, client redis.UniversalClient, edit func(*redisdelay.SubscriberConfig)) *redisdelay.Subscriber {
	cfg := redisdelay.SubscriberConfig{Client: client, NackBackoff: redisdelay.ConstantBackoff(0)}
	edit(&cfg)
	sub, err := redisdelay.NewSubscriber(cfg, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}
