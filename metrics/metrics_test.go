package metrics_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	watermillmetrics "github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
	"github.com/watermill-redisdelay/redisdelay/metrics"
)

// TestMain says how many tests were skipped for want of redis-server.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.ReportSkips()
	os.Exit(code)
}

// forRedisAndMiniredis runs f as a parallel subtest against a real redis-server and miniredis.
func forRedisAndMiniredis(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	for name, start := range map[string]func(t *testing.T) redis.UniversalClient{
		"redis": func(t *testing.T) redis.UniversalClient { return redistest.Start(t, redistest.Options{}).Client(t) },
		"miniredis": func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, start(t))
		})
	}
}

// counterValue returns the value of the counter or gauge name with the given labels in
// registry (the sample count for a histogram), 0 when it has none.
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

// series returns the label names and values of every series of registry whose name starts
// with prefix, one "name{label=value,...}" line each.
func series(t *testing.T, registry *prometheus.Registry, prefix string) map[string]float64 {
	t.Helper()
	families, err := registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = counterValue(t, registry, f.GetName(), labelMap(m))
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// TestEveryHookFeedsTheSeriesDashboardsRead pins the metric names and labels: dashboards and
// alerts query them, so a change here breaks them.
func TestEveryHookFeedsTheSeriesDashboardsRead(t *testing.T) {
	registry := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Namespace: "test", Registerer: registry})
	require.NoError(t, err)
	_, err = metrics.New(metrics.Config{Namespace: "test", Registerer: registry})
	assert.Error(t, err, "registering the same names twice is refused")

	var hooks redisdelay.Metrics = m
	hooks.Published("orders", 3, 1)
	hooks.Published("orders", 2, 0)
	hooks.Claimed("orders", "billing", []time.Duration{time.Millisecond, 0})
	hooks.LeasesExpired("orders", "billing", 4)
	hooks.Acked("orders", "billing")
	hooks.Nacked("orders", "billing")
	hooks.DeadLettered("orders", "billing", redisdelay.DeadLetterReasonNacked)
	hooks.Expired("orders", "billing", redisdelay.ExpiryActionDrop)
	hooks.RegistrationLost("orders", "billing")
	hooks.ScriptCalled("claim", 2*time.Millisecond)
	hooks.Cancelled("orders", "billing")
	hooks.Rescheduled("orders", "audit")

	assert.Equal(t, map[string]float64{
		"test_published_total{topic=orders}":                                          5,
		"test_deduplicated_total{topic=orders}":                                       1,
		"test_claimed_total{consumer_group=billing,topic=orders}":                     2,
		"test_delivery_lateness_seconds{consumer_group=billing,topic=orders}":         2,
		"test_lease_expired_total{consumer_group=billing,topic=orders}":               4,
		"test_acked_total{consumer_group=billing,topic=orders}":                       1,
		"test_nacked_total{consumer_group=billing,topic=orders}":                      1,
		"test_dead_lettered_total{consumer_group=billing,reason=nacked,topic=orders}": 1,
		"test_expired_total{action=drop,consumer_group=billing,topic=orders}":         1,
		"test_registrations_lost_total{consumer_group=billing,topic=orders}":          1,
		"test_script_duration_seconds{script=claim}":                                  1,
		"test_cancelled_total{consumer_group=billing,topic=orders}":                   1,
		"test_rescheduled_total{consumer_group=audit,topic=orders}":                   1,
		"test_sampler_errors_total{}":                                                 0,
	}, series(t, registry, "test_"))
}

func TestANilMetricsRecordsNothing(t *testing.T) {
	var m *metrics.Metrics
	assert.NotPanics(t, func() {
		m.Published("orders", 1, 1)
		m.Claimed("orders", "billing", []time.Duration{time.Second})
		m.Acked("orders", "billing")
		m.ScriptCalled("claim", time.Millisecond)
	})
	_, _, ok := m.Lateness("orders", "billing")
	assert.False(t, ok)
}

func TestLatenessEstimatesTheQuantilesOfWhatWasClaimed(t *testing.T) {
	m, err := metrics.New(metrics.Config{Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	late := make([]time.Duration, 100)
	for i := range late {
		late[i] = 10 * time.Millisecond
	}
	late[99] = 10 * time.Second
	m.Claimed("orders", "billing", late)

	p50, p99, ok := m.Lateness("orders", "billing")
	require.True(t, ok)
	// Within the bucket that holds 10 ms, and the one that holds 10 s for p99 (buckets grow
	// about 2.4 times each).
	assert.True(t, p50 > 4*time.Millisecond && p50 <= 25*time.Millisecond, "p50 %s", p50)
	assert.True(t, p99 > 4*time.Millisecond && p99 <= 25*time.Millisecond, "p99 %s: 99 of 100 are 10 ms", p99)
	_, _, ok = m.Lateness("orders", "no-such-group")
	assert.False(t, ok, "a group that claimed nothing has no lateness")
}

func TestMetricsCountAWorkloadThroughPublisherSubscriberAndInspector(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		registry := prometheus.NewRegistry()
		m, err := metrics.New(metrics.Config{Namespace: "test", Registerer: registry})
		require.NoError(t, err)
		topic := "orders-" + watermill.NewShortUUID()
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Metrics: m}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		// Watermill's own metrics work on the same registry.
		decorated, err := watermillmetrics.NewPrometheusMetricsBuilder(registry, "test", "watermill").DecoratePublisher(pub)
		require.NoError(t, err)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, Metrics: m, MaxAttempts: 1}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, Metrics: m}, nil)
		require.NoError(t, err)
		require.NoError(t, sub.SubscribeInitialize(topic))

		// "ack" is acked, "nack" nacked on its only attempt (a dead letter), "later" cancelled,
		// "soon" run now and acked; the second "ack" is a duplicate.
		require.NoError(t, decorated.Publish(topic, keyed("ack", 0), keyed("nack", 0), keyed("ack", 0), keyed("later", time.Hour), keyed("soon", time.Hour)))
		ch, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		for range 2 {
			msg := receive(t, ch)
			if msg.Metadata.Get(redisdelay.KeyMetadataKey) == "nack" {
				msg.Nack()
			} else {
				msg.Ack()
			}
		}
		_, err = in.Cancel(ctx, topic, redisdelay.ByKey("later"))
		require.NoError(t, err)
		_, err = in.RunNow(ctx, topic, redisdelay.ByKey("soon"))
		require.NoError(t, err)
		receive(t, ch).Ack()

		group := map[string]string{"topic": topic, "consumer_group": redisdelay.DefaultConsumerGroup}
		// Acks are counted by the subscription once it sees them, a moment after Ack returns.
		require.Eventually(t, func() bool {
			return counterValue(t, registry, "test_dead_lettered_total", group) == 1 && counterValue(t, registry, "test_acked_total", group) == 2
		}, 5*time.Second, 5*time.Millisecond)
		assert.Equal(t, 4.0, counterValue(t, registry, "test_published_total", map[string]string{"topic": topic}))
		assert.Equal(t, 1.0, counterValue(t, registry, "test_deduplicated_total", map[string]string{"topic": topic}))
		for name, want := range map[string]float64{
			"test_claimed_total": 3, "test_delivery_lateness_seconds": 3, "test_nacked_total": 1,
			"test_cancelled_total": 1, "test_rescheduled_total": 1,
		} {
			assert.Equal(t, want, counterValue(t, registry, name, group), name)
		}
		assert.Positive(t, counterValue(t, registry, "test_script_duration_seconds", map[string]string{"script": "claim"}))
		p50, p99, ok := m.Lateness(topic, redisdelay.DefaultConsumerGroup)
		require.True(t, ok)
		assert.True(t, p50 <= p99 && p99 < time.Second, "lateness p50 %s, p99 %s", p50, p99)
		assert.Positive(t, testutil.CollectAndCount(registry, "test_watermill_publish_time_seconds"), "Watermill's publisher metrics sit next to ours")

		// Gauges come from the sampler, never from a scrape.
		require.NoError(t, decorated.Publish(topic, keyed("g1", time.Hour), keyed("g2", time.Hour)))
		require.NoError(t, m.Sample(ctx, in))
		assert.Equal(t, 2.0, counterValue(t, registry, "test_scheduled", group))
		assert.Equal(t, 1.0, counterValue(t, registry, "test_dead_letters", group))
		for s := range series(t, registry, "test_") {
			if strings.HasPrefix(s, "test_watermill_") {
				continue // Watermill's own
			}
			for _, l := range strings.Split(strings.TrimSuffix(s[strings.Index(s, "{")+1:], "}"), ",") {
				if l != "" {
					assert.Contains(t, []string{"topic", "consumer_group", "reason", "script"}, strings.SplitN(l, "=", 2)[0], "%s: no other label, never a key or ID", s)
				}
			}
		}
	})
}

// keyed returns a message with key, due after d.
func keyed(key string, d time.Duration) *message.Message {
	msg := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), nil), key)
	if d > 0 {
		delay.Message(msg, delay.For(d))
	}
	return msg
}

// receive waits up to 5 s for one message.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "channel closed")
		return msg
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
		return nil
	}
}

func TestMetricsCountNamesThatCannotBeLabelsUnderAPlaceholder(t *testing.T) {
	forRedisAndMiniredis(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		prefix := "labels-" + watermill.NewShortUUID() + ":"
		// Names that an older version stored, before ValidateName refused them.
		keys := store.KeyNamesForTest(prefix, store.Partition{Topic: "bad\xff\xfe"}, "")
		require.NoError(t, client.HSet(ctx, keys.Registry, "bad\xff\xfe", 1).Err())
		require.NoError(t, client.SAdd(ctx, keys.Groups, "group\xc3", "fine").Err())
		reg := prometheus.NewRegistry()
		logs := &errorCount{}
		m, err := metrics.New(metrics.Config{Namespace: "test", Registerer: reg, Logger: logs})
		require.NoError(t, err)
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix}, nil)
		require.NoError(t, err)
		for range 2 {
			require.NotPanics(t, func() { require.NoError(t, m.Sample(ctx, in)) })
		}
		require.NotPanics(t, func() { m.Acked("bad\xff\xfe", "fine") })

		inv := metrics.InvalidLabelValue
		assert.Equal(t, map[string]float64{
			"test_scheduled{consumer_group=" + inv + ",topic=" + inv + "}": 0,
			"test_scheduled{consumer_group=fine,topic=" + inv + "}":        0,
		}, series(t, reg, "test_scheduled"))
		assert.Equal(t, 1.0, counterValue(t, reg, "test_acked_total", map[string]string{"topic": inv, "consumer_group": "fine"}))
		assert.Equal(t, 1, logs.count(), "logged once")
	})
}

// errorCount is a logger that counts its Error entries.
type errorCount struct {
	watermill.NopLogger
	mu sync.Mutex
	n  int
}

func (l *errorCount) Error(string, error, watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
}

func (l *errorCount) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}
