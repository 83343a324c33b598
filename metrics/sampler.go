package metrics

// This file owns the queue-size gauges: one Sample pass sets them from Inspector.Stats, and
// RunSampler repeats it.

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watermill-redisdelay/redisdelay"
)

// Sample sets the gauges (scheduled, due, in flight, dead letters, oldest due age) of every
// topic and group in the registry from one Inspector.Stats pass: one script of O(log N)
// commands per topic partition. A topic with no consumer group has its parked messages under
// consumer_group "" (redisdelay.ParkedGroup), as Stats reports them. Series of groups that are
// gone are deleted. A scrape reads the gauges as last set and never touches Redis. Errors:
// Inspector.Stats's; the gauges keep their values then.
func (m *Metrics) Sample(ctx context.Context, in *redisdelay.Inspector) error {
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
func (m *Metrics) RunSampler(ctx context.Context, in *redisdelay.Inspector, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("redisdelay/metrics: RunSampler: interval must be > 0")
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
