package redisdelay

// This file owns the metrics seam: the interface through which the Publisher, the Subscriber
// and the Inspector report what they do. The Prometheus implementation lives in the package
// github.com/watermill-redisdelay/redisdelay/metrics, so that this package builds without it.

import (
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Metrics receives what the Publishers, Subscribers and Inspectors given it
// (PublisherConfig.Metrics, SubscriberConfig.Metrics, InspectorConfig.Metrics) do. The package
// github.com/watermill-redisdelay/redisdelay/metrics implements it with Prometheus
// (metrics.New). When the config field is nil, nothing is reported and no script call is
// timed.
//
// Its methods are called on the hot paths, from many goroutines at once: an implementation
// must be safe for concurrent use, return quickly, never block on I/O, and never retain the
// slices it is given. Names (topic, group, reason, script) are as stored: an implementation
// that uses them as label values must cope with any string, one that is not valid UTF-8
// included (an older version may have stored one).
type Metrics interface {
	// Published is called once per successful Publish call (and per Scheduler tick that
	// publishes): stored is how many of its messages were stored (scheduled, or replacing a
	// message with the same key), duplicates how many were not stored because their key was
	// taken (OutcomeDuplicate). A failed call reports nothing.
	Published(topic string, stored, duplicates int)
	// Claimed is called once per claim that leased at least one message to a subscription of
	// consumer group on topic, with one lateness per claimed message: the claim's time minus the
	// message's due time, both on the Redis clock, never negative: 0 for a message claimed ahead
	// of its due time, which the subscription then holds until it is due (see "Never early" in
	// docs/guarantees.md). The slice is only valid during the call.
	Claimed(topic, group string, lateness []time.Duration)
	// LeasesExpired is called when a claim found n > 0 leases of the group that had expired
	// before Ack or Nack, and made their messages due again.
	LeasesExpired(topic, group string, n int)
	// Acked and Nacked are called once per message that a handler acked or nacked, when the
	// subscription sees the Ack or the Nack (before it reaches Redis).
	Acked(topic, group string)
	Nacked(topic, group string)
	// DeadLettered is called once per message moved to its dead-letter topic, after Redis
	// confirmed the move; reason is a DeadLetterReason… constant.
	DeadLettered(topic, group, reason string)
	// Expired is called once per message that the group claimed for its first attempt after its
	// deliver-by deadline and did not hand out, with what was done with it (see
	// SubscriberConfig.OnExpired). A dead-lettered one is reported to DeadLettered too.
	Expired(topic, group string, action ExpiryAction)
	// RegistrationLost is called when a subscription found its consumer group's registration
	// lost with Redis's data (a restart without persistence, FLUSHALL, a failover to an empty
	// replica) and registers the group again.
	RegistrationLost(topic, group string)
	// ScriptCalled is called after each Lua script call, with the script's name and the call's
	// duration as the client saw it, round trip included, whether or not it failed.
	ScriptCalled(script string, took time.Duration)
	// Cancelled is called once per consumer group in which an Inspector cancel took effect (a
	// message in flight included, since it is cancelled too); Rescheduled once per group in
	// which an Inspector reschedule (RunNow included) gave a message a new due time.
	Cancelled(topic, group string)
	Rescheduled(topic, group string)
}

// observeScripts returns the store's script observer for m: nil when m is nil, so that the
// store does not time its calls.
func observeScripts(m Metrics) func(script string, took time.Duration) {
	if m == nil {
		return nil
	}
	return m.ScriptCalled
}

// recordPublished reports the outcomes of one Publish call to m, if any.
func recordPublished(m Metrics, topic string, outcomes []Outcome) {
	if m == nil {
		return
	}
	dup := 0
	for _, o := range outcomes {
		if o == OutcomeDuplicate {
			dup++
		}
	}
	m.Published(topic, len(outcomes)-dup, dup)
}

// recordClaim reports one claim to m, if any: its messages' lateness, computed into *buf
// (reused from claim to claim, so that a claim allocates nothing), and the leases it found
// expired.
func recordClaim(m Metrics, topic, group string, res store.ClaimResult, buf *[]time.Duration) {
	if m == nil {
		return
	}
	if len(res.Messages) > 0 {
		late := (*buf)[:0]
		for _, c := range res.Messages {
			late = append(late, time.Duration(max(res.ClaimedUs-c.DueUs, 0))*time.Microsecond)
		}
		*buf = late
		m.Claimed(topic, group, late)
	}
	if res.Expired > 0 {
		m.LeasesExpired(topic, group, int(res.Expired))
	}
}

// recordActed reports to m, if any, the groups an Inspector operation took effect in:
// cancelled (a message in flight counts, since it is cancelled too) or rescheduled.
func recordActed(m Metrics, cancel bool, topic string, groups map[string]Outcome) {
	if m == nil {
		return
	}
	for g, o := range groups {
		recordActedIn(m, cancel, topic, g, o)
	}
}

// recordActedIn is recordActed for one group, whose outcome is o.
func recordActedIn(m Metrics, cancel bool, topic, group string, o Outcome) {
	switch {
	case m == nil:
	case cancel && (o == OutcomeApplied || o == OutcomeInFlight):
		m.Cancelled(topic, group)
	case !cancel && o == OutcomeApplied:
		m.Rescheduled(topic, group)
	}
}
