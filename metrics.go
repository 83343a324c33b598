package redisdelay

// This file owns the Prometheus metrics: counters and histograms the Publisher, the
// Subscriber and the Inspector update, and the sampler of the queue-size gauges.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultMetricsNamespace is the namespace of the metrics when MetricsConfig.Namespace is empty.
const DefaultMetricsNamespace = "redisdelay"

// InvalidLabelValue is the label value under which Metrics counts a topic, consumer group or
// reason that cannot be a Prometheus label value (one that is not valid UTF-8). ValidateName
// refuses such names, so only names stored by older versions can have one; Prometheus would
// panic on them.
const InvalidLabelValue = "invalid"

// MetricsConfig configures Metrics.
type MetricsConfig struct {
	// Namespace is put before every metric name; DefaultMetricsNamespace when empty.
	Namespace string
	// Registerer receives the metrics; prometheus.DefaultRegisterer when nil. Watermill's
	// metrics.NewPrometheusMetricsBuilder can use the same one.
	Registerer prometheus.Registerer
	// Logger hears, once, of the first label value counted under InvalidLabelValue;
	// watermill.NopLogger when nil.
	Logger watermill.LoggerAdapter
}

// Metrics are the Prometheus metrics of the Publishers, Subscribers and Inspectors that are
// given it (PublisherConfig.Metrics, SubscriberConfig.Metrics, InspectorConfig.Metrics), and
// the queue-size gauges that RunSampler keeps up to date. One Metrics serves any number of
// them. Labels are topic and consumer_group only (plus reason, action and script where
// named); never a message ID or key. A nil *Metrics records nothing.
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

// LatenessBuckets are the buckets of delivery_lateness_seconds: 100 µs to 1 h, each about
// 2.4 times the one before.
var LatenessBuckets = prometheus.ExponentialBucketsRange(0.0001, 3600, 20)

// NewMetrics creates the metrics and registers them. The error is the Registerer's, for example
// when metrics with the same names are registered already (use another Namespace).
func NewMetrics(config MetricsConfig) (*Metrics, error) {
	if config.Namespace == "" {
		config.Namespace = DefaultMetricsNamespace
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
			return nil, fmt.Errorf("redisdelay: register metrics: %w", err)
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

// latenessOf returns the delivery_lateness_seconds series of topic and group, creating it.
func (m *Metrics) latenessOf(topic, group string) prometheus.Observer {
	pair := [2]string{topic, group}
	if h, ok := m.latenessSeen.Load(pair); ok {
		return h.(prometheus.Observer)
	}
	h := m.lateness.WithLabelValues(m.label(topic), m.label(group))
	m.latenessSeen.Store(pair, h)
	return h
}

// publishedOutcomes counts the outcomes of one Publish call.
func (m *Metrics) publishedOutcomes(topic string, outcomes []Outcome) {
	if m == nil {
		return
	}
	var stored, dup float64
	for _, o := range outcomes {
		if o == OutcomeDuplicate {
			dup++
		} else {
			stored++
		}
	}
	m.published.WithLabelValues(m.label(topic)).Add(stored)
	if dup > 0 {
		m.deduplicated.WithLabelValues(m.label(topic)).Add(dup)
	}
}

// claim records one claim: its messages, their lateness (claim time minus due time, Redis
// clock), and the expired leases it made due again.
func (m *Metrics) claim(topic, group string, res store.ClaimResult) {
	if m == nil {
		return
	}
	if len(res.Messages) > 0 {
		m.claimed.WithLabelValues(m.label(topic), m.label(group)).Add(float64(len(res.Messages)))
		h := m.latenessOf(topic, group)
		for _, c := range res.Messages {
			h.Observe(max(float64(res.NowUs-c.DueUs), 0) / 1e6)
		}
	}
	if res.Expired > 0 {
		m.leaseExpired.WithLabelValues(m.label(topic), m.label(group)).Add(float64(res.Expired))
	}
}

// handled counts a handler's Ack or Nack.
func (m *Metrics) handled(topic, group string, acked bool) {
	if m == nil {
		return
	}
	if acked {
		m.acked.WithLabelValues(m.label(topic), m.label(group)).Inc()
	} else {
		m.nacked.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// deadLetter counts a message moved to its dead-letter topic.
func (m *Metrics) deadLetter(topic, group, reason string) {
	if m != nil {
		m.deadLettered.WithLabelValues(m.label(topic), m.label(group), m.label(reason)).Inc()
	}
}

// expired counts a message expired by its deliver-by deadline, and what was done with it.
func (m *Metrics) expired(topic, group string, action ExpiryAction) {
	if m != nil {
		m.expirations.WithLabelValues(m.label(topic), m.label(group), string(action)).Inc()
	}
}

// registrationLost counts a subscription that registered its group again after Redis lost its
// data.
func (m *Metrics) registrationLost(topic, group string) {
	if m != nil {
		m.registrationsLost.WithLabelValues(m.label(topic), m.label(group)).Inc()
	}
}

// scriptObserver returns the function that records the duration of one script call, for the
// store; nil when m is nil, so that the store does not time its calls.
func (m *Metrics) scriptObserver() func(script string, took time.Duration) {
	if m == nil {
		return nil
	}
	return func(script string, took time.Duration) {
		m.scriptDuration.WithLabelValues(m.label(script)).Observe(took.Seconds())
	}
}

// acted counts the groups an Inspector operation took effect in: cancelled (a message in
// flight counts, since it is cancelled too) or rescheduled.
func (m *Metrics) acted(cancel bool, topic string, groups map[string]Outcome) {
	if m == nil {
		return
	}
	for g, o := range groups {
		switch {
		case cancel && (o == OutcomeApplied || o == OutcomeInFlight):
			m.cancelled.WithLabelValues(m.label(topic), m.label(g)).Inc()
		case !cancel && o == OutcomeApplied:
			m.rescheduled.WithLabelValues(m.label(topic), m.label(g)).Inc()
		}
	}
}

// Sample sets the gauges (scheduled, due, in flight, dead letters, oldest due age) of every
// topic and group in the registry from one Inspector.Stats pass: one script of O(log N)
// commands per topic partition. A topic with no consumer group has its parked messages under
// consumer_group "" (ParkedGroup), as Stats reports them. Series of groups that are gone are deleted. A scrape reads
// the gauges as last set and never touches Redis. Errors: Inspector.Stats's; the gauges keep
// their values then.
func (m *Metrics) Sample(ctx context.Context, in *Inspector) error {
	stats, err := in.Stats(ctx)
	if err != nil {
		m.samplerErrors.Inc()
		return err
	}
	seen := map[[2]string]bool{}
	for _, s := range stats {
		labels := []string{m.label(s.Topic), m.label(s.Group)}
		seen[[2]string(labels)] = true
		m.scheduled.WithLabelValues(labels...).Set(float64(s.Scheduled))
		m.due.WithLabelValues(labels...).Set(float64(s.Due))
		m.inFlight.WithLabelValues(labels...).Set(float64(s.InFlight))
		m.deadLetters.WithLabelValues(labels...).Set(float64(s.DeadLetters))
		m.dueAge.WithLabelValues(labels...).Set(s.OldestDueAge.Seconds())
	}
	for pair := range m.sampled {
		if !seen[pair] {
			for _, g := range []*prometheus.GaugeVec{m.scheduled, m.due, m.inFlight, m.deadLetters, m.dueAge} {
				g.DeleteLabelValues(pair[0], pair[1])
			}
		}
	}
	m.sampled = seen
	return nil
}

// RunSampler calls Sample every interval until ctx ends. Failed passes are counted in
// sampler_errors_total and tried again at the next interval. Run it on one goroutine per
// Metrics. It returns ctx's error.
func (m *Metrics) RunSampler(ctx context.Context, in *Inspector, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("redisdelay: RunSampler: interval must be > 0")
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		_ = m.Sample(ctx, in)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// Lateness estimates the median and the 99th percentile of delivery_lateness_seconds for a
// topic and consumer group since the process started, by linear interpolation within the
// histogram's buckets (as PromQL's histogram_quantile does). ok is false when nothing was
// claimed yet. It reads only: a group that claimed nothing gets no series. It fits
// dashboard.Options.Lateness.
func (m *Metrics) Lateness(topic, group string) (p50, p99 time.Duration, ok bool) {
	if m == nil {
		return 0, 0, false
	}
	h, found := m.latenessSeen.Load([2]string{topic, group})
	if !found {
		return 0, 0, false
	}
	var out dto.Metric
	if err := h.(prometheus.Metric).Write(&out); err != nil || out.GetHistogram().GetSampleCount() == 0 {
		return 0, 0, false
	}
	hist := out.GetHistogram()
	quantile := func(q float64) time.Duration {
		rank := q * float64(hist.GetSampleCount())
		lower, below := 0.0, 0.0
		for _, b := range hist.GetBucket() {
			upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
			if count >= rank {
				if count == below {
					return seconds(upper)
				}
				return seconds(lower + (upper-lower)*(rank-below)/(count-below))
			}
			lower, below = upper, count
		}
		return seconds(lower) // above the last bucket: its bound is the best estimate
	}
	return quantile(0.5), quantile(0.99), true
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
