package metrics

// This file owns delivery lateness: the histogram series that claims fill, and Lateness, which
// reads their quantiles for the dashboard.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// LatenessBuckets are the buckets of delivery_lateness_seconds: 100 µs to 1 h, each about
// 2.4 times the one before.
var LatenessBuckets = prometheus.ExponentialBucketsRange(0.0001, 3600, 20)

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

// Lateness estimates the median and the 99th percentile of delivery_lateness_seconds for a
// topic and consumer group since the process started, by linear interpolation within the
// histogram's buckets (as PromQL's histogram_quantile does). ok is false when nothing was
// claimed yet. It reads only: a group that claimed nothing gets no series. It makes *Metrics a
// dashboard.LatenessSource (dashboard.Options.Lateness).
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
