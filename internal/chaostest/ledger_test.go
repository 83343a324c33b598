//go:build chaos

package chaostest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"

	"github.com/watermill-redisdelay/redisdelay"
)

// outcome is what a Publish call said about its messages.
type outcome int

const (
	pending outcome = iota // the call has not returned yet
	stored                 // nil: the messages must arrive
	unknown                // an error wrapping redisdelay.ErrOutcomeUnknown: they may or may not arrive
	refused                // any other error: nothing of the batch was stored, so none may arrive
)

// publication is one message handed to Publish.
type publication struct {
	start   time.Time     // just before the Publish call (and before delay.For)
	delay   time.Duration // the message's delay: it is due no earlier than start+delay
	outcome outcome
	err     error
}

// delivery is one message received by a consumer.
type delivery struct {
	at      time.Time
	attempt string // redisdelay.AttemptMetadataKey
}

// ledger records every publication and delivery of a scenario and checks the delivery
// guarantees against them. It is safe for concurrent use.
type ledger struct {
	mu          sync.Mutex
	pubs        map[string]*publication
	deliveries  map[string][]delivery
	calls       int
	maxLatency  time.Duration
	errorsByKey map[string]int // Publish errors by kind, for the report
	delivered   chan struct{}  // signalled (non-blocking) on every delivery
}

func newLedger() *ledger {
	return &ledger{
		pubs:        map[string]*publication{},
		deliveries:  map[string][]delivery{},
		errorsByKey: map[string]int{},
		delivered:   make(chan struct{}, 1),
	}
}

// publish calls pub.Publish and records its outcome for every message. Each message needs a
// UUID of its own and its delay metadata already set; start is the time taken before the delay
// was set. Nil messages (bad input) are passed on but not recorded.
func (l *ledger) publish(pub message.Publisher, topic string, start time.Time, delays []time.Duration, msgs ...*message.Message) error {
	l.mu.Lock()
	for i, m := range msgs {
		if m == nil {
			continue
		}
		if _, dup := l.pubs[m.UUID]; dup {
			panic("chaostest: UUID published twice by the test: " + m.UUID)
		}
		l.pubs[m.UUID] = &publication{start: start, delay: delays[i]}
	}
	l.mu.Unlock()

	err := pub.Publish(topic, msgs...)
	latency := time.Since(start)

	o := classify(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.maxLatency = max(l.maxLatency, latency)
	if err != nil {
		l.errorsByKey[errorKind(err)]++
	}
	for _, m := range msgs {
		if m == nil {
			continue
		}
		p := l.pubs[m.UUID]
		p.outcome, p.err = o, err
	}
	return err
}

// classify maps a Publish error to what it promises about the messages.
func classify(err error) outcome {
	switch {
	case err == nil:
		return stored
	case errors.Is(err, redisdelay.ErrOutcomeUnknown):
		return unknown
	default:
		return refused
	}
}

// errorKind names the class of a Publish error in reports.
func errorKind(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{redisdelay.ErrOutcomeUnknown, "outcome_unknown"},
		{redisdelay.ErrRedisFull, "redis_full"},
		{redisdelay.ErrEvictingRedis, "evicting_redis"},
		{redisdelay.ErrInvalidMessage, "invalid_message"},
		{redisdelay.ErrPublisherClosed, "publisher_closed"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return "other(" + msg + ")"
}

// publication reports whether uuid was published through the ledger.
func (l *ledger) publication(uuid string) (publication, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pubs[uuid]
	if !ok {
		return publication{}, false
	}
	return *p, true
}

// deliver records the delivery of msg at the given time.
func (l *ledger) deliver(uuid, attempt string, at time.Time) {
	l.mu.Lock()
	l.deliveries[uuid] = append(l.deliveries[uuid], delivery{at: at, attempt: attempt})
	l.mu.Unlock()
	select {
	case l.delivered <- struct{}{}:
	default:
	}
}

// consume records and acks every message of ch until it is closed. Run it in a goroutine.
func (l *ledger) consume(ch <-chan *message.Message) {
	for msg := range ch {
		l.deliver(msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now())
		msg.Ack()
	}
}

// missing returns how many messages whose Publish returned nil have not been delivered yet.
func (l *ledger) missing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for uuid, p := range l.pubs {
		if p.outcome == stored && len(l.deliveries[uuid]) == 0 {
			n++
		}
	}
	return n
}

// waitAllStoredDelivered waits until every message whose Publish returned nil has been
// delivered, or until timeout; it returns how many are still missing.
func (l *ledger) waitAllStoredDelivered(timeout time.Duration) int {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond) // deliveries may all have come before the call
	defer tick.Stop()
	for {
		n := l.missing()
		if n == 0 {
			return 0
		}
		select {
		case <-l.delivered:
		case <-tick.C:
		case <-deadline.C:
			return l.missing()
		}
	}
}

// summary is the figures of one scenario.
type summary struct {
	published, acknowledged, unknown, refused int
	delivered, deliveries                     int // distinct UUIDs, and all deliveries
	lost, duplicated, early                   int
	firstAttemptTwice                         int // UUIDs delivered more than once with attempt "1"
	phantom                                   int // delivered although Publish refused them
	unknownArrived                            int
	calls                                     int
	maxLatency                                time.Duration
	examples                                  map[string][]string // a few UUIDs per violation
	errorKinds                                map[string]int
}

func (l *ledger) summarize() summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := summary{calls: l.calls, maxLatency: l.maxLatency, examples: map[string][]string{}, errorKinds: l.errorsByKey}
	example := func(kind, text string) {
		if len(s.examples[kind]) < 5 {
			s.examples[kind] = append(s.examples[kind], text)
		}
	}
	for uuid, p := range l.pubs {
		s.published++
		ds := l.deliveries[uuid]
		switch p.outcome {
		case stored:
			s.acknowledged++
			if len(ds) == 0 {
				s.lost++
				example("lost", uuid)
			}
		case unknown:
			s.unknown++
			if len(ds) > 0 {
				s.unknownArrived++
			}
		case refused:
			s.refused++
			if len(ds) > 0 {
				s.phantom++
				example("phantom", fmt.Sprintf("%s (Publish said: %v)", uuid, p.err))
			}
		}
		firsts := 0
		for _, d := range ds {
			if d.attempt == "1" {
				firsts++
			}
			if due := p.start.Add(p.delay); d.at.Before(due) {
				s.early++
				example("early", fmt.Sprintf("%s %s before its due time (delay %s, attempt %s)", uuid, due.Sub(d.at), p.delay, d.attempt))
			}
		}
		if firsts > 1 {
			s.firstAttemptTwice++
			example("first attempt twice", fmt.Sprintf("%s delivered %d times with attempt 1", uuid, firsts))
		}
	}
	for uuid, ds := range l.deliveries {
		s.deliveries += len(ds)
		s.delivered++
		if _, ok := l.pubs[uuid]; !ok {
			example("unknown UUID", uuid)
		}
	}
	s.duplicated = s.deliveries - s.delivered
	return s
}

// String is the one-line summary every scenario logs.
func (s summary) String() string {
	kinds := make([]string, 0, len(s.errorKinds))
	for k, n := range s.errorKinds {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("published=%d acknowledged=%d delivered=%d lost=%d duplicated=%d early=%d max_publish_latency=%s | calls=%d outcome_unknown=%d (arrived %d) refused=%d phantom=%d first_attempt_twice=%d failed_calls=[%s]",
		s.published, s.acknowledged, s.delivered, s.lost, s.duplicated, s.early, s.maxLatency.Round(time.Millisecond),
		s.calls, s.unknown, s.unknownArrived, s.refused, s.phantom, s.firstAttemptTwice, strings.Join(kinds, " "))
}

// report logs the scenario's summary line and asserts the guarantees every scenario shares:
// nothing acknowledged is lost, nothing is early, nothing refused arrives, and no Publish stored
// a message twice (attempt "1" is delivered at most once per UUID). It returns the summary.
func (l *ledger) report(t *testing.T, scenario string) summary {
	t.Helper()
	s := l.summarize()
	t.Logf("SUMMARY scenario=%s %s", scenario, s)
	assert.Zero(t, s.lost, "messages whose Publish returned nil were never delivered, e.g. %v", s.examples["lost"])
	assert.Zero(t, s.early, "messages were delivered before their due time, e.g. %v", s.examples["early"])
	assert.Zero(t, s.phantom, "messages whose Publish returned an error without ErrOutcomeUnknown were delivered, e.g. %v", s.examples["phantom"])
	assert.Zero(t, s.firstAttemptTwice, "a message was stored twice (attempt 1 delivered more than once), e.g. %v", s.examples["first attempt twice"])
	assert.Empty(t, s.examples["unknown UUID"], "deliveries of UUIDs nobody published")
	return s
}

// storedSince returns how many messages whose Publish started at or after since returned nil.
func (l *ledger) storedSince(since time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.pubs {
		if p.outcome == stored && !p.start.Before(since) {
			n++
		}
	}
	return n
}
