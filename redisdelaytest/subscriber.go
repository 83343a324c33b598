package redisdelaytest

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/clock"
)

// Subscriber consumes for one consumer group of a Queue. It is a *redisdelay.Subscriber whose
// channels the Queue watches, so that Advance knows when the group's handlers are done; it
// implements message.Subscriber and message.SubscribeInitializer, so a message.Router or a
// CQRS processor runs on it unchanged.
type Subscriber struct {
	q     *Queue
	group string
	sub   *redisdelay.Subscriber
	lease time.Duration
	wg    sync.WaitGroup // the forwarders
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// Subscriber returns the Subscriber of consumer group, the same one on every call; it is
// closed when the test ends. An invalid group name fails the test.
func (q *Queue) Subscriber(group string) *Subscriber {
	q.t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if s, ok := q.subscribers[group]; ok {
		return s
	}
	cfg := q.opts.Subscriber
	cfg.Client, cfg.ConsumerGroup = q.client, group
	if cfg.LeaseTimeout == 0 {
		cfg.LeaseTimeout = redisdelay.DefaultLeaseTimeout
	}
	sub, err := redisdelay.NewSubscriber(cfg, q.opts.Logger)
	if err != nil {
		q.mu.Unlock() // Fatalf ends the goroutine: the cleanup takes the lock
		defer q.mu.Lock()
		q.t.Fatalf("redisdelaytest: subscriber of group %q: %v", group, err)
	}
	clock.Inject(sub, clock.Func(q.Now))
	s := &Subscriber{q: q, group: group, sub: sub, lease: cfg.LeaseTimeout}
	q.subscribers[group] = s
	return s
}

// SubscribeInitialize registers the group on topic, as redisdelay.Subscriber does.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	return s.sub.SubscribeInitialize(topic)
}

// Subscribe subscribes the group to topic, as redisdelay.Subscriber does; the Queue records
// every message handed out on the returned channel (see Queue.Received) and waits, in Advance,
// for each to be acked or nacked.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	g := s.q.subscribed(topic, s.group, s.q.opts.Subscriber.Partitions, s.lease)
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer s.q.unsubscribed(g)
		for msg := range in {
			s.forward(g, msg, out)
		}
	}()
	return out, nil
}

// forward hands msg to the application, recorded before the hand-off so that Received never
// lags behind an ack, and waits until the subscription is done with it: its context ends once
// it is acked or nacked, or the subscription stops.
func (s *Subscriber) forward(g *groupState, msg *message.Message, out chan<- *message.Message) {
	done := msg.Context().Done()
	s.q.handingOut(g, msg)
	defer s.q.finished(g, msg)
	select {
	case out <- msg:
	case <-done:
		return
	}
	<-done
}

// Close closes the group's subscriptions (see redisdelay.Subscriber.Close). It is idempotent.
func (s *Subscriber) Close() error {
	err := s.sub.Close()
	s.wg.Wait()
	return err
}

// Receive takes the next message from msgs, a channel of one of the Queue's Subscribers, for a
// test that holds it across Advance: until it is acked or nacked, its group is busy (see
// Settle), and its lease is kept however far the clock moves. It fails t when msgs is closed
// or no message comes within Options.SettleTimeout of wall time.
func (q *Queue) Receive(t TB, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-msgs:
		if !ok {
			t.Fatalf("redisdelaytest: Receive: the channel is closed")
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, g := range q.groups {
			if _, ok := g.held[msg]; ok {
				g.held[msg] = true
			}
		}
		return msg
	case <-time.After(q.opts.SettleTimeout):
		t.Fatalf("redisdelaytest: Receive: no message at %s within %s of wall time", q.Now().Format(time.RFC3339Nano), q.opts.SettleTimeout)
		return nil
	}
}

// Consume subscribes group to topic and acks every message it receives; Received lists them.
func (q *Queue) Consume(topic, group string) {
	q.t.Helper()
	q.Handle(topic, group, nil)
}

// Handle subscribes group to topic and runs handle on every message it receives, in a
// goroutine of its own: it acks the message when handle returns nil, and nacks it otherwise
// (so the nack backoff, MaxAttempts and the dead-letter topic apply). A nil handle acks
// everything. The subscription ends when the test does. A failed Subscribe fails the test.
func (q *Queue) Handle(topic, group string, handle func(*message.Message) error) {
	q.t.Helper()
	msgs, err := q.Subscriber(group).Subscribe(context.Background(), topic)
	if err != nil {
		q.t.Fatalf("redisdelaytest: subscribe group %q to topic %q: %v", group, topic, err)
	}
	go func() {
		for msg := range msgs {
			if handle == nil || handle(msg) == nil {
				msg.Ack()
			} else {
				msg.Nack()
			}
		}
	}()
}

// Delivery is one message handed to a consumer group's application.
type Delivery struct {
	Topic, Group string
	// Key is the message's key (redisdelay.WithKey), "" when it has none.
	Key     string
	UUID    string
	Payload []byte
	// Metadata is the message's metadata as handed out, delivery keys included.
	Metadata message.Metadata
	// DueAt is the due time it was delivered for; At is the virtual time of the hand-off.
	DueAt, At time.Time
	// Attempt counts the deliveries of the message in its group, from 1.
	Attempt int
}

// Message rebuilds the delivered message, with its metadata and payload (to unpack a batch
// with redisdelay.UnpackBatch, say).
func (d Delivery) Message() *message.Message {
	msg := message.NewMessage(d.UUID, d.Payload)
	msg.Metadata = maps.Clone(d.Metadata)
	return msg
}

// Received returns what the Subscribers of group handed out so far, in hand-off order,
// redeliveries included.
func (q *Queue) Received(group string) []Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Delivery(nil), q.received[group]...)
}

// topicGroup names the subscriptions of a consumer group on a topic.
type topicGroup struct{ topic, group string }

// groupState is what the Queue knows of the subscriptions of a group on a topic.
type groupState struct {
	topicGroup
	partitions int
	lease      time.Duration
	running    int
	// held are the messages handed to the application (or being handed) and not yet acked or
	// nacked; true for those the test took with Receive.
	held map[*message.Message]bool
}

// subscribed records a new subscription of group on topic, of that many partitions.
func (q *Queue) subscribed(topic, group string, partitions int, lease time.Duration) *groupState {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := topicGroup{topic, group}
	g := q.groups[k]
	if g == nil {
		g = &groupState{topicGroup: k, partitions: partitions, lease: lease, held: map[*message.Message]bool{}}
		q.groups[k] = g
	}
	g.running++
	return g
}

// unsubscribed records the end of a subscription.
func (q *Queue) unsubscribed(g *groupState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	g.running--
}

// handingOut records msg, about to be handed to the application.
func (q *Queue) handingOut(g *groupState, msg *message.Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	g.held[msg] = false
	attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptMetadataKey))
	due, _ := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
	q.received[g.group] = append(q.received[g.group], Delivery{
		Topic: g.topic, Group: g.group, Key: msg.Metadata.Get(redisdelay.KeyMetadataKey),
		UUID: msg.UUID, Payload: msg.Payload, Metadata: maps.Clone(msg.Metadata),
		DueAt: due, At: q.now, Attempt: attempt,
	})
	q.notify()
}

// finished records that the application is done with msg.
func (q *Queue) finished(g *groupState, msg *message.Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(g.held, msg)
	q.notify()
}

// runningGroups returns the groups with a running subscription.
func (q *Queue) runningGroups() []*groupState {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*groupState
	for _, g := range q.groups {
		if g.running > 0 {
			out = append(out, g)
		}
	}
	return out
}
