package redisdelay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	watermillmetrics "github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// counterValue returns the value of the counter name with the given labels in registry, 0 when
// it has none.
func counterValue(t *testing.T, registry *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				case m.GetHistogram() != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(labels)
}

func TestMetricsCountAKnownWorkload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		registry := prometheus.NewRegistry()
		m, err := redisdelay.NewMetrics(redisdelay.MetricsConfig{Namespace: "test", Registerer: registry})
		require.NoError(t, err)
		_, err = redisdelay.NewMetrics(redisdelay.MetricsConfig{Namespace: "test", Registerer: registry})
		assert.Error(t, err, "registering the same names twice is refused")

		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Metrics = m })
		// Watermill's own metrics work on the same registry.
		decorated, err := watermillmetrics.NewPrometheusMetricsBuilder(registry, "test", "watermill").DecoratePublisher(pub)
		require.NoError(t, err)
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
		require.NoError(t, decorated.Publish(topic, keyed("k4", 0, "")))
		held := receive(t, subscribe(t, stuck, topic), 5*time.Second)
		require.Equal(t, "k4", held.Metadata.Get(redisdelay.KeyMetadataKey))

		var msgs []*message.Message
		for _, k := range []string{"k0", "k1", "k2", "k3"} {
			msgs = append(msgs, keyed(k, 0, ""))
		}
		msgs = append(msgs, keyed("k0", 0, ""), keyed("later", time.Hour, ""), keyed("soon", time.Hour, ""))
		require.NoError(t, decorated.Publish(topic, msgs...))

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

		group := map[string]string{"topic": topic, "consumer_group": redisdelay.DefaultConsumerGroup}
		onTopic := map[string]string{"topic": topic}
		// Acks are counted by the subscription once it sees them, a moment after Ack returns.
		require.Eventually(t, func() bool {
			return counterValue(t, registry, "test_dead_lettered_total", map[string]string{"topic": topic, "reason": redisdelay.DeadLetterReasonNacked}) == 1 &&
				counterValue(t, registry, "test_acked_total", group) == 5
		}, 5*time.Second, 5*time.Millisecond)
		for name, want := range map[string]float64{
			"test_published_total":    7, // k4, then 6 distinct keys
			"test_deduplicated_total": 1,
		} {
			assert.Equal(t, want, counterValue(t, registry, name, onTopic), name)
		}
		for name, want := range map[string]float64{
			// k0 k1 k2, k3 twice, k4 twice (once by each subscriber), soon.
			"test_claimed_total":             8,
			"test_delivery_lateness_seconds": 8,
			"test_acked_total":               5,
			"test_nacked_total":              2,
			"test_lease_expired_total":       1,
			"test_cancelled_total":           1,
			"test_rescheduled_total":         1,
		} {
			assert.Equal(t, want, counterValue(t, registry, name, group), name)
		}
		assert.Positive(t, counterValue(t, registry, "test_script_duration_seconds", map[string]string{"script": "claim"}))
		p50, p99, ok := m.Lateness(topic, redisdelay.DefaultConsumerGroup)
		require.True(t, ok)
		assert.True(t, p50 <= p99 && p99 < time.Second, "lateness p50 %s, p99 %s", p50, p99)
		_, _, ok = m.Lateness(topic, "no-such-group")
		assert.False(t, ok)
		assert.Positive(t, testutil.CollectAndCount(registry, "test_watermill_publish_time_seconds"), "Watermill's publisher metrics sit next to ours")
		held.Ack() // refused: its lease was lost

		// Gauges come from the sampler, never from a scrape.
		require.NoError(t, decorated.Publish(topic, keyed("g1", time.Hour, ""), keyed("g2", time.Hour, "")))
		require.NoError(t, m.Sample(context.Background(), in))
		assert.Equal(t, 2.0, counterValue(t, registry, "test_scheduled", group))
		assert.Equal(t, 1.0, counterValue(t, registry, "test_dead_letters", group))
		families, err := registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "test_") || strings.HasPrefix(f.GetName(), "test_watermill_") {
				continue // Watermill's own
			}
			for _, metric := range f.GetMetric() {
				for _, l := range metric.GetLabel() {
					assert.Contains(t, []string{"topic", "consumer_group", "reason", "script"}, l.GetName(), "%s: no other label, never a key or ID", f.GetName())
				}
			}
		}
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

func TestMetricsCountNamesThatCannotBeLabelsUnderAPlaceholder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		prefix := "labels-" + watermill.NewShortUUID() + ":"
		// Names that an older version stored, before ValidateName refused them.
		registry, groups := redisdelay.RegistryKeysForTest(prefix, "bad\xff\xfe")
		require.NoError(t, b.client.HSet(ctx, registry, "bad\xff\xfe", 1).Err())
		require.NoError(t, b.client.SAdd(ctx, groups, "group\xc3", "fine").Err())
		reg := prometheus.NewRegistry()
		logs := newRecordingLogger()
		m, err := redisdelay.NewMetrics(redisdelay.MetricsConfig{Namespace: "test", Registerer: reg, Logger: logs})
		require.NoError(t, err)
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		for range 2 {
			require.NotPanics(t, func() { require.NoError(t, m.Sample(ctx, in)) })
		}
		families, err := reg.Gather()
		require.NoError(t, err)
		series := map[string]bool{}
		for _, f := range families {
			if f.GetName() != "test_scheduled" {
				continue
			}
			for _, s := range f.GetMetric() {
				var labels []string
				for _, l := range s.GetLabel() {
					labels = append(labels, l.GetValue())
				}
				series[strings.Join(labels, "|")] = true
			}
		}
		inv := redisdelay.InvalidLabelValue
		assert.Equal(t, map[string]bool{inv + "|" + inv: true, "fine|" + inv: true}, series)
		assert.Len(t, logs.above(watermill.InfoLogLevel), 1, "logged once")
	})
}
