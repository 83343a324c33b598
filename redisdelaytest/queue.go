package redisdelaytest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultStart is the virtual clock's first instant when Options.Start is zero.
var DefaultStart = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// DefaultSettleTimeout bounds, in wall time, how long Advance, AdvanceTo and Settle wait for
// the subscriptions when Options.SettleTimeout is zero.
const DefaultSettleTimeout = 10 * time.Second

// TB is the part of testing.TB the kit uses; *testing.T, *testing.B and *testing.F satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Options configures a Queue. The zero value works.
type Options struct {
	// Start is the virtual clock's first instant; DefaultStart when zero. It is truncated to
	// the microsecond, the precision of due times.
	Start time.Time
	// Publisher configures the Queue's Publisher; the kit sets Client.
	Publisher redisdelay.PublisherConfig
	// Subscriber configures every Subscriber of the Queue; the kit sets Client, and
	// ConsumerGroup to the group asked for. Publisher.Partitions is used when Partitions is
	// zero.
	Subscriber redisdelay.SubscriberConfig
	// Logger logs for the Publisher and the Subscribers; watermill.NopLogger when nil.
	Logger watermill.LoggerAdapter
	// Resolution makes Advance and AdvanceTo stop only at multiples of it from Start: a message
	// is then handed out at the first such instant at or after its due time (never before it,
	// at most Resolution after it), with every message due by then, in due order. Fewer stops
	// make an advance over thousands of distinct due times faster. Zero stops at every due time.
	Resolution time.Duration
	// SettleTimeout bounds, in wall time, how long one Advance, AdvanceTo or Settle waits for
	// the subscriptions to take and finish what is due; DefaultSettleTimeout when zero. Past
	// it, the test fails with what is still pending.
	SettleTimeout time.Duration
}

// Queue is an embedded queue for one test: a miniredis with a virtual clock, a Publisher, an
// Inspector and a Subscriber per consumer group, all closed when the test ends. Its methods
// are safe for concurrent use, but Advance, AdvanceTo and Settle fail the test with
// t.Fatalf, so call them from the test's goroutine.
type Queue struct {
	t         TB
	opts      Options
	mr        *miniredis.Miniredis
	client    *redis.Client
	publisher *redisdelay.Publisher
	inspector *redisdelay.Inspector
	store     store.Store // names the wake channels

	// advancing serialises Advance, AdvanceTo and Settle.
	advancing sync.Mutex

	mu          sync.Mutex
	now         time.Time
	subscribers map[string]*Subscriber // by consumer group
	groups      map[topicGroup]*groupState
	received    map[string][]Delivery // by consumer group, in hand-off order
	// starting counts, by consumer group, the Subscribers made on the Publisher (a
	// Scheduler's) that have neither subscribed nor been closed yet.
	starting map[string]int
	// events receives a value (without blocking the sender) on each hand-off and each
	// finished message, for settle; seen counts them.
	events chan struct{}
	seen   atomic.Uint64
}

// New starts an embedded queue for the test t, its virtual clock at opts.Start, and closes
// it with t.Cleanup. An invalid config fails the test.
func New(t TB, opts Options) *Queue {
	t.Helper()
	opts = opts.withDefaults()
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatalf("redisdelaytest: start miniredis: %v", err)
	}
	mr.SetTime(opts.Start)
	mr.ClockTTL(true) // key retention and the publish call tokens expire on the virtual clock
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	q := &Queue{
		t:           t,
		opts:        opts,
		mr:          mr,
		client:      client,
		now:         opts.Start,
		store:       store.New(client, opts.Subscriber.KeyPrefix, store.Options{}),
		subscribers: map[string]*Subscriber{},
		groups:      map[topicGroup]*groupState{},
		received:    map[string][]Delivery{},
		starting:    map[string]int{},
		events:      make(chan struct{}, 1),
	}
	t.Cleanup(q.close)
	q.publisher = q.newPublisher()
	q.inspector = q.newInspector()
	return q
}

// withDefaults returns o with its zero fields set to their defaults, Start truncated to the
// microsecond, and what the Publisher and the Subscribers must agree on made one: the
// partitions (the larger of the two, at least 1), the key prefix (the Subscriber's, else the
// Publisher's, else redisdelay.DefaultKeyPrefix) and the marshaler (the Publisher's, when the
// Subscriber has none and it unmarshals too).
func (o Options) withDefaults() Options {
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	o.Start = o.Start.Truncate(time.Microsecond)
	if o.SettleTimeout == 0 {
		o.SettleTimeout = DefaultSettleTimeout
	}
	if o.Logger == nil {
		o.Logger = watermill.NopLogger{}
	}
	partitions := max(o.Publisher.Partitions, o.Subscriber.Partitions, 1)
	o.Publisher.Partitions, o.Subscriber.Partitions = partitions, partitions
	if o.Subscriber.KeyPrefix == "" {
		o.Subscriber.KeyPrefix = o.Publisher.KeyPrefix
	}
	if o.Subscriber.KeyPrefix == "" {
		o.Subscriber.KeyPrefix = redisdelay.DefaultKeyPrefix
	}
	o.Publisher.KeyPrefix = o.Subscriber.KeyPrefix
	if o.Subscriber.Marshaler == nil {
		if m, ok := o.Publisher.Marshaler.(redisdelay.MarshalerUnmarshaler); ok {
			o.Subscriber.Marshaler = m
		}
	}
	return o
}

// newPublisher returns the Queue's Publisher, on the virtual clock. An invalid config fails
// the test.
func (q *Queue) newPublisher() *redisdelay.Publisher {
	q.t.Helper()
	cfg := q.opts.Publisher
	cfg.Client = q.client
	pub, err := redisdelay.NewPublisher(cfg, q.opts.Logger)
	if err != nil {
		q.t.Fatalf("redisdelaytest: %v", err)
	}
	clock.Inject(pub, clock.Watched(q.Now, q.watch))
	return pub
}

// newInspector returns the Queue's Inspector. An invalid config fails the test.
func (q *Queue) newInspector() *redisdelay.Inspector {
	q.t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{
		Client:      q.client,
		KeyPrefix:   q.opts.Subscriber.KeyPrefix,
		Partitions:  q.opts.Publisher.Partitions,
		Unmarshaler: q.opts.Subscriber.Marshaler,
	}, q.opts.Logger)
	if err != nil {
		q.t.Fatalf("redisdelaytest: %v", err)
	}
	return insp
}

// close closes the subscribers, the publisher, the client and miniredis, in that order.
func (q *Queue) close() {
	q.mu.Lock()
	subs := make([]*Subscriber, 0, len(q.subscribers))
	for _, s := range q.subscribers {
		subs = append(subs, s)
	}
	q.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
	_ = q.publisher.Close()
	_ = q.client.Close()
	q.mr.Close()
}

// Publisher returns the Queue's Publisher: a message.Publisher whose delays run on the
// virtual clock (delay.Until reads Now).
func (q *Queue) Publisher() *redisdelay.Publisher { return q.publisher }

// Inspector returns the Queue's Inspector. Its times are on the virtual clock.
func (q *Queue) Inspector() *redisdelay.Inspector { return q.inspector }

// Client returns the Redis client of the embedded miniredis.
func (q *Queue) Client() redis.UniversalClient { return q.client }

// Layout returns the Queue's layout (its client, key prefix and marshaler), to make more
// components of the same queue: layout.SubscriberConfig(group) for a Subscriber of your own, or
// a schedule.Scheduler on Publisher.
func (q *Queue) Layout() redisdelay.Layout { return q.publisher.Layout() }

// Miniredis returns the embedded miniredis. Move its time only through the Queue.
func (q *Queue) Miniredis() *miniredis.Miniredis { return q.mr }

// Now returns the virtual time: the Redis clock of the queue, which only Advance and
// AdvanceTo move.
func (q *Queue) Now() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.now
}

// Publish publishes msgs on topic through the Queue's Publisher and fails the test on an
// error naming the topic.
func (q *Queue) Publish(t TB, topic string, msgs ...*message.Message) {
	t.Helper()
	if err := q.publisher.Publish(topic, msgs...); err != nil {
		t.Fatalf("redisdelaytest: publish on topic %q: %v", topic, err)
	}
}

// wakeAll sends a "check now" on the wake channel of every partition of every running
// subscription: a sleeping one claims at once, one that waits for its handler extends its
// leases (the heartbeat).
func (q *Queue) wakeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var parts []store.Group
	for _, g := range q.runningGroups() {
		for n := 0; n < g.partitions; n++ {
			parts = append(parts, store.Partition{Topic: g.topic, N: n}.Of(g.group))
		}
	}
	_ = q.store.CheckNow(ctx, parts) // a lost wake-up is sent again by a later poll of settle
}

// notify tells settle that something happened.
func (q *Queue) notify() {
	q.seen.Add(1)
	select {
	case q.events <- struct{}{}:
	default:
	}
}
