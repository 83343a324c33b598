// Package metrics records the Prometheus metrics of redisdelay: the counters and histograms
// that the Publishers, Subscribers and Inspectors given a *Metrics update through the
// redisdelay.Metrics interface, and the queue-size gauges that RunSampler keeps up to date.
//
//	m, err := metrics.New(metrics.Config{})
//	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Metrics: m}, logger)
//
// It is a package of its own so that redisdelay builds without Prometheus.
package metrics

import (
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/watermill-redisdelay/redisdelay"
)

// DefaultNamespace is the namespace of the metrics when Config.Namespace is empty.
const DefaultNamespace = "redisdelay"

// InvalidLabelValue is the label value under which Metrics counts a topic, consumer group or
// reason that cannot be a Prometheus label value (one that is not valid UTF-8).
// redisdelay.ValidateName refuses such names, so only names stored by older versions can have
// one; Prometheus would panic on them.
const InvalidLabelValue = "invalid"

// Config configures Metrics.
type Config struct {
	// Namespace is put before every metric name; DefaultNamespace when empty.
	Namespace string
	// Registerer receives the metrics; prometheus.DefaultRegisterer when nil. Watermill's
	// metrics.NewPrometheusMetricsBuilder can use the same one.
	Registerer prometheus.Registerer
	// Logger hears, once, of the first label value counted under InvalidLabelValue;
	// watermill.NopLogger when nil.
	Logger watermill.LoggerAdapter
}

// Metrics are the Prometheus metrics of the Publishers, Subscribers and Inspectors that are
// given it (redisdelay.PublisherConfig.Metrics, SubscriberConfig.Metrics,
// InspectorConfig.Metrics; it implements redisdelay.Metrics), and the queue-size gauges that
// RunSampler keeps up to date. One Metrics serves any number of them. Labels are topic and
// consumer_group only (plus reason, action and script where named); never a message ID or
// key. A nil *Metrics records nothing. It is safe for concurrent use.
type Metrics struct {
	published, deduplicated                       *prometheus.CounterVec // topic
	claimed, acked, nacked, leaseExpired          *prometheus.CounterVec // topic, consumer_group
	deadLettered                                  *prometheus.CounterVec // topic, consumer_group, reason
	expirations                                   *prometheus.CounterVec // topic, consumer_group, action
	cancelled, rescheduled                        *prometheus.CounterVec // topic, consumer_group
	registrationsLost                             *prometheus.CounterVec // topic, consumer_group
	lateness                                      *prometheus.HistogramVec
	scriptDuration                                *prometheus.HistogramVec // script
	scheduled, due, inFlight, deadLetters, dueAge *prometheus.GaugeVec
	samplerErrors                                 prometheus.Counter
	sampled                                       map[[2]string]bool // label pairs the gauges hold
	// latenessSeen holds the delivery_lateness_seconds series that claims created, by topic
	// and group, so that Lateness reads them without creating empty ones.
	latenessSeen  sync.Map // [2]string -> prometheus.Observer
	logger        watermill.LoggerAdapter
	invalidLogged sync.Once
}

// New creates the metrics and registers them. The error is the Registerer's, for example when
// metrics with the same names are registered already (use another Namespace).
func New(config Config) (*Metrics, error) {
	if config.Namespace == "" {
		config.Namespace = DefaultNamespace
	}
	if config.Registerer == nil {
		config.Registerer = prometheus.DefaultRegisterer
	}
	if config.Logger == nil {
		config.Logger = watermill.NopLogger{}
	}
	m := newMetricVectors(config.Namespace)
	m.logger = config.Logger
	for _, c := range []prometheus.Collector{m.published, m.deduplicated, m.claimed, m.acked, m.nacked, m.leaseExpired, m.deadLettered, m.expirations,
		m.cancelled, m.rescheduled, m.registrationsLost, m.lateness, m.scriptDuration, m.scheduled, m.due, m.inFlight, m.deadLetters, m.dueAge, m.samplerErrors} {
		if err := config.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("redisdelay/metrics: register: %w", err)
		}
	}
	return m, nil
}

// newMetricVectors creates the metrics, unregistered, in namespace ns.
func newMetricVectors(ns string) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, []string{"topic", "consumer_group"})
	}
	return &Metrics{
		published:    counter("published_total", "Messages stored by Publish (scheduled or replacing a message with the same key).", "topic"),
		deduplicated: counter("deduplicated_total", "Messages Publish did not store because their key was taken.", "topic"),
		claimed:      counter("claimed_total", "Messages claimed for a delivery attempt.", "topic", "consumer_group"),
		acked:        counter("acked_total", "Messages acked by a handler.", "topic", "consumer_group"),
		nacked:       counter("nacked_total", "Messages nacked by a handler.", "topic", "consumer_group"),
		leaseExpired: counter("lease_expired_total", "Leases that expired before Ack or Nack, making the message due again.", "topic", "consumer_group"),
		deadLettered: counter("dead_lettered_total", "Messages moved to their dead-letter topic, by reason.", "topic", "consumer_group", "reason"),
		expirations: counter("expired_total", "Messages claimed for their first attempt after their deliver-by deadline and not handed out, "+
			"by action: dead-letter (also counted in dead_lettered_total with reason expired) or drop.", "topic", "consumer_group", "action"),
		cancelled:   counter("cancelled_total", "Messages cancelled through the Inspector.", "topic", "consumer_group"),
		rescheduled: counter("rescheduled_total", "Messages given a new due time through the Inspector.", "topic", "consumer_group"),
		registrationsLost: counter("registrations_lost_total", "Times a subscription of a topic partition found its consumer group's registration lost with Redis's data "+
			"(a restart without persistence, FLUSHALL, a failover to an empty replica) and registered the group again.", "topic", "consumer_group"),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "delivery_lateness_seconds",
			Help:    "Claim time minus due time, both on the Redis clock: how late a message was handed out.",
			Buckets: LatenessBuckets,
		}, []string{"topic", "consumer_group"}),
		scriptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "script_duration_seconds",
			Help:    "Duration of each Lua script call, round trip included, as the client sees it.",
			Buckets: prometheus.ExponentialBucketsRange(0.00005, 5, 16),
		}, []string{"script"}),
		scheduled:     gauge("scheduled", "Messages due later, as the sampler last saw them."),
		due:           gauge("due", "Messages due now and not claimed, as the sampler last saw them."),
		inFlight:      gauge("in_flight", "Messages leased to a consumer, as the sampler last saw them."),
		deadLetters:   gauge("dead_letters", "Dead letters waiting on the group's dead-letter topic, as the sampler last saw them."),
		dueAge:        gauge("oldest_due_age_seconds", "How long the oldest due message has been due, as the sampler last saw it."),
		samplerErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sampler_errors_total", Help: "Sampling passes that failed."}),
		sampled:       map[[2]string]bool{},
	}
}

// label returns v as a label value: v itself, or InvalidLabelValue when v is not valid UTF-8,
// on which Prometheus's WithLabelValues would panic. The first such value is logged.
func (m *Metrics) label(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	m.invalidLogged.Do(func() {
		m.logger.Error("redisdelay: a metric label value is not valid UTF-8; it and any later such value are counted as "+InvalidLabelValue,
			nil, watermill.LogFields{"label_value": quote(v)})
	})
	return InvalidLabelValue
}

// quote quotes s for a log field, as redisdelay's errors do: whole when it has at most 256
// bytes, else its first 256 bytes, "..." and its length.
func quote(s string) string {
	const most = 256
	if len(s) <= most {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:most], len(s))
}

// Published counts the messages a Publish call stored (published_total) and those it did
// not store because their key was taken (deduplicated_total).
func (m *Metrics) Published(topic string, stored, duplicates int) {
	if m == nil {
		return
	}
	m.published.WithLabelValues(m.label(topic)).Add(float64(stored))
	if duplicates > 0 {
		m.deduplicated.WithLabelValues(m.label(topic)).Add(float64(duplicates))
	}
}

// Claimed counts the messages of one claim (claimed_total) and observes their lateness
// (delivery_lateness_seconds).
func (m *Metrics) Claimed(topic, group string, lateness []time.Duration) {
	if m == nil || len(lateness) == 0 {
		return
	}
	m.claimed.WithLabelValues(m.label(topic), m.label(group)).Add(float64(len(lateness)))
	h := m.latenessOf(topic, group)
	for _, d := range lateness {
		h.Observe(d.Seconds())
	}
}

// LeasesExpired counts leases that expired before Ack or Nack (lease_expired_total).
func (m *Metrics) LeasesExpired(topic, group string, n int) {
	if m != nil {
		m.leaseExpired.WithLabelValues(m.label(topic), m.label(group)).Add(float64(n))
	}
}

// Acked counts a handler's Ack (acked_total).
func (m *Metrics) Acked(topic, group string) {
	if m != nil {
		m.acked.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// Nacked counts a handler's Nack (nacked_total).
func (m *Metrics) Nacked(topic, group string) {
	if m != nil {
		m.nacked.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// DeadLettered counts a message moved to its dead-letter topic (dead_lettered_total).
func (m *Metrics) DeadLettered(topic, group, reason string) {
	if m != nil {
		m.deadLettered.WithLabelValues(m.label(topic), m.label(group), m.label(reason)).Inc()
	}
}

// Expired counts a message expired by its deliver-by deadline, by what was done with it
// (expired_total).
func (m *Metrics) Expired(topic, group string, action redisdelay.ExpiryAction) {
	if m != nil {
		m.expirations.WithLabelValues(m.label(topic), m.label(group), m.label(string(action))).Inc()
	}
}

// RegistrationLost counts a subscription that registered its group again after Redis lost its
// data (registrations_lost_total).
func (m *Metrics) RegistrationLost(topic, group string) {
	if m != nil {
		m.registrationsLost.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// ScriptCalled observes the duration of one script call (script_duration_seconds).
func (m *Metrics) ScriptCalled(script string, took time.Duration) {
	if m != nil {
		m.scriptDuration.WithLabelValues(m.label(script)).Observe(took.Seconds())
	}
}

// Cancelled counts a message cancelled through the Inspector in one group (cancelled_total).
func (m *Metrics) Cancelled(topic, group string) {
	if m != nil {
		m.cancelled.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// Rescheduled counts a message given a new due time through the Inspector in one group
// (rescheduled_total).
func (m *Metrics) Rescheduled(topic, group string) {
	if m != nil {
		m.rescheduled.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

var _ redisdelay.Metrics = (*Metrics)(nil)
