package redisdelay

// This file owns the Publisher: its construction, Publish and its group commit (one
// groupcommit.Committer per topic partition, each round one publish script call), and Close.
// Preparing each message is in outgoing.go.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/groupcommit"
	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Publisher publishes Watermill messages to the Redis delay queue. It is safe for concurrent use.
type Publisher struct {
	config PublisherConfig
	logger watermill.LoggerAdapter
	store  store.Store

	closeMu sync.RWMutex // Publish holds it for reading, so Close waits for publishes under way
	closed  bool

	groups     groupCache
	topics     registeredTopics
	eviction   evictionGuard
	queues     sync.Map      // store.Partition -> *groupcommit.Committer[store.Outgoing], bounded by maxQueues
	queueCount atomic.Int64  // entries in queues
	next       atomic.Uint64 // round-robin partition counter
	callTTL    time.Duration // how long Redis keeps a publish call's token
	nopLogger  bool          // the logger is watermill.NopLogger: skip building log fields per call
	// clock reads the delay metadata against; the real clock but in the test kit (see
	// internal/clock).
	clock clock.Clock
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. A nil logger means watermill.NopLogger. It makes no Redis
// call; an invalid config is returned as an error naming the field.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{"provider": "redisdelay"})
	st := store.New(config.Client, config.KeyPrefix, store.Options{DurableReplicas: config.DurableReplicas, DurableTimeout: config.DurableTimeout, Observe: observeScripts(config.Metrics)})
	p := &Publisher{
		config:   config,
		logger:   logger,
		store:    st,
		eviction: evictionGuard{store: st, allow: config.AllowEvictingRedis, logger: logger},
		callTTL:  max(publishCallTTLFactor*config.OperationTimeout, minPublishCallTTL),
	}
	p.nopLogger = isNop(logger)
	return p, nil
}

// isNop reports whether logger is watermill.NopLogger (whose With returns itself), so that a
// hot path can skip building the fields of a log line nobody reads: a LoggerAdapter cannot say
// which levels it writes.
func isNop(logger watermill.LoggerAdapter) bool {
	_, nop := logger.(watermill.NopLogger)
	return nop
}

// Publish stores msgs on topic and schedules each, at its due time, for every consumer group
// registered on the topic; on a topic with no group yet, the messages wait for the first group
// that registers. One Publish is one atomic Lua script call: all of msgs are stored or none
// are. With Partitions > 1 that holds per partition: a call whose messages name different
// partitions through PartitionKey makes one call per partition. Concurrent Publish calls to one
// topic share script calls (group commit), so a busy publisher needs fewer round trips than
// calls. A script call that the Redis client runs twice stores its messages once.
//
// The due time of each message is the Redis server clock at the time of the call plus DelayOf
// the message; a delay set with delay.WithContext on the message's context counts too (it is
// written to the message's metadata first, as delay.NewPublisher does). The delivery keys of a
// message received from a Subscriber (AttemptMetadataKey, DueTimeMetadataKey,
// ServedDelayMetadataKey) are not stored; other metadata keys that start with
// ReservedMetadataPrefix are refused, except the dead-letter keys, so that a dead letter can be
// re-published as it is.
//
// Errors, each naming the topic and the first UUID:
//   - ErrPublisherClosed after Close;
//   - an error wrapping ErrInvalidName for a bad topic;
//   - a *MessageError (wrapping ErrInvalidMessage) naming the topic, UUID and metadata key of a
//     message that cannot be stored (a nil message, bad delay metadata, a reserved key, more
//     than MaxMessageBytes marshaled); nothing of the batch is stored;
//   - ErrEvictingRedis when Redis evicts keys (see PublisherConfig.AllowEvictingRedis);
//   - an error wrapping ErrRedisFull when Redis is at maxmemory; nothing is stored;
//   - an error wrapping ErrOutcomeUnknown when the call timed out after its script was sent,
//     the connection was lost before the reply, or the last reply was one the Redis client tries
//     again on (LOADING, READONLY, CLUSTERDOWN, ...): all of msgs are stored or none is, and
//     publishing them again may deliver them twice;
//   - when OperationTimeout passed while the call waited behind other calls of the topic, an
//     error wrapping context.DeadlineExceeded that says nothing was stored;
//   - otherwise the Redis error.
//
// The call returns within OperationTimeout, even when Redis does not answer; the cancellation
// of the messages' contexts does not abort it.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	_, err := p.PublishWithResult(topic, msgs...)
	return err
}

// PublishWithResult publishes as Publish does and returns, when it succeeds, the outcome of each
// message, in the order of msgs: Scheduled, or for a message with a key (see WithKey) that is
// taken, Duplicate or Replaced as its DuplicatePolicy decides. Publish logs each Duplicate at
// debug level. The outcomes of a call that the Redis client ran twice are those of the first
// run. Its errors are Publish's.
func (p *Publisher) PublishWithResult(topic string, msgs ...*message.Message) ([]Outcome, error) {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	for i, msg := range msgs {
		if msg == nil {
			return nil, &MessageError{Topic: topic, Err: fmt.Errorf("message %d of %d is nil", i+1, len(msgs))}
		}
	}
	if err := applyContextDelays(topic, msgs); err != nil {
		return nil, err
	}
	outcomes, err := p.publish(topic, msgs...)
	if err != nil {
		return nil, err
	}
	for i, o := range outcomes {
		if o == OutcomeDuplicate {
			p.logger.Debug("Duplicate not stored: its key is taken", watermill.LogFields{"topic": topic, "message_uuid": msgs[i].UUID, "key": messageKeyOf(msgs[i])})
		}
	}
	return outcomes, nil
}

// delayApplier turns a delay set with delay.WithContext on a message's context into delay
// metadata, as Watermill's own delayed publishers do, and publishes nothing: Publish then
// publishes the messages. AllowNoDelay keeps messages without a delay due at once. It is
// stateless, so one serves every call (a delay.NewPublisher per call cost allocations).
var delayApplier, _ = delay.NewPublisher(publishFunc(func(string, ...*message.Message) error { return nil }), delay.PublisherConfig{AllowNoDelay: true})

// applyContextDelays runs delayApplier on msgs unless none has a context of its own: reading a
// context value costs delay.NewPublisher an allocation per message, and a message without a
// context (context.Background) carries no delay there.
func applyContextDelays(topic string, msgs []*message.Message) error {
	for _, msg := range msgs {
		if msg.Context() != context.Background() {
			return delayApplier.Publish(topic, msgs...)
		}
	}
	return nil
}

// publish stores msgs on topic with the config's settings. Its calls are not cancelled with
// the message's context: a message received from a Subscriber is often re-published after its
// Ack cancelled that context.
func (p *Publisher) publish(topic string, msgs ...*message.Message) ([]Outcome, error) {
	parent := context.Background()
	if len(msgs) > 0 {
		// A message's context is Background unless it was given one.
		if parent = msgs[0].Context(); parent.Done() != nil {
			parent = context.WithoutCancel(parent)
		}
	}
	return p.publishWith(parent, topic, msgs, seam.PublishOptions{})
}

// publishWith is the one commit path of every publish, Publish's and the Scheduler's (through
// internal/seam): it prepares msgs with o's per-call settings, stores them, one commit per
// partition, within OperationTimeout of parent, records their outcomes in the metrics and
// registers the topic. It returns the outcome of each message in the order of msgs.
func (p *Publisher) publishWith(parent context.Context, topic string, msgs []*message.Message, o seam.PublishOptions) ([]Outcome, error) {
	if err := ValidateName("topic", topic); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	// Made here, not in prepare, so that partitions stays on the stack.
	batch, partitions := make([]store.Outgoing, len(msgs)), make([]int, len(msgs))
	if err := p.prepare(topic, msgs, o, batch, partitions); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.config.OperationTimeout)
	if !p.eviction.settled() || !p.topics.known(topic, p.config.Partitions) {
		if err := p.settle(parent, deadline, topic, msgs); err != nil {
			return nil, err
		}
	}
	outcomes, err := p.commitAll(parent, deadline, topic, msgs, batch, partitions, o.NotAfterUs)
	if err != nil {
		return nil, err
	}
	recordPublished(p.config.Metrics, topic, outcomes)
	if !p.nopLogger {
		p.logger.Trace("Published", watermill.LogFields{"topic": topic, "messages": len(msgs)})
	}
	return outcomes, nil
}

// settle reads, by deadline, what a publish to topic checks once: the eviction policy (see
// evictionGuard) and the topic's partitions in the registry (see registeredTopics), and
// returns the error that refuses msgs.
func (p *Publisher) settle(parent context.Context, deadline time.Time, topic string, msgs []*message.Message) error {
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	if err := p.eviction.check(ctx); err != nil {
		return fmt.Errorf("redisdelay: publish %d message(s) to topic %s (first UUID %s): %w", len(msgs), quote(topic), quote(msgs[0].UUID), err)
	}
	return p.topics.ensure(ctx, p.store, topic, p.config.Partitions, p.logger)
}

// prepare prepares each of msgs for topic (see outgoing), with o's due times and key
// retention, into batch and its partition into partitions (both len(msgs)).
func (p *Publisher) prepare(topic string, msgs []*message.Message, o seam.PublishOptions, batch []store.Outgoing, partitions []int) error {
	now := p.clock.Now()
	roundRobin := 0
	if p.config.Partitions > 1 {
		roundRobin = int(p.next.Add(1) % uint64(p.config.Partitions))
	}
	for i, msg := range msgs {
		out, n, err := p.outgoing(topic, msg, now, p.clock.Virtual(), roundRobin)
		if err != nil {
			return err
		}
		if o.At != nil {
			out.Delay, out.At, out.Latest = 0, o.At[i], time.Time{}
		}
		if key := messageKeyOf(msg); key != "" && o.KeyRetention > 0 { // outgoing refused an empty key
			out.KeySpec = store.KeySpec(store.KeepExisting, o.KeyRetention, 0, key)
		}
		batch[i], partitions[i] = out, n
	}
	return nil
}

// commitAll stores batch, the prepared msgs, each on its partition in partitions, one commit
// per partition by deadline (see commit), fenced at notAfterUs when it is > 0, and returns the
// outcome of each message in the order of msgs.
func (p *Publisher) commitAll(parent context.Context, deadline time.Time, topic string, msgs []*message.Message, batch []store.Outgoing, partitions []int, notAfterUs int64) ([]Outcome, error) {
	outcomes := make([]Outcome, len(msgs))
	if p.config.Partitions == 1 {
		// One partition: the whole batch, in order, without regrouping it.
		if err := p.commitPart(parent, deadline, topic, 0, batch, msgs[0].UUID, outcomes, nil, notAfterUs); err != nil {
			return nil, err
		}
		return outcomes, nil
	}
	for n, indexes := range byPartition(partitions) {
		part := make([]store.Outgoing, len(indexes))
		for j, i := range indexes {
			part[j] = batch[i]
		}
		if err := p.commitPart(parent, deadline, topic, n, part, msgs[indexes[0]].UUID, outcomes, indexes, notAfterUs); err != nil {
			return nil, err
		}
	}
	return outcomes, nil
}

// commitPart stores part, the messages of msgs for partition n of topic, and writes their
// outcomes to outcomes at indexes (at 0, 1, … when indexes is nil).
func (p *Publisher) commitPart(parent context.Context, deadline time.Time, topic string, n int, part []store.Outgoing, firstUUID string, outcomes []Outcome, indexes []int, notAfterUs int64) error {
	letters, err := p.commit(parent, deadline, store.Partition{Topic: topic, N: n}, part, notAfterUs)
	if err != nil {
		return fmt.Errorf("redisdelay: publish %d message(s) to topic %s partition %d (first UUID %s): %w", len(part), quote(topic), n, quote(firstUUID), err)
	}
	for j := range part {
		i := j
		if indexes != nil {
			i = indexes[j]
		}
		outcomes[i] = outcomeOf(store.PublishOutcome(letters, j))
	}
	return nil
}

// commit stores msgs on topic partition part by deadline through its groupcommit.Committer,
// which shares rounds with concurrent calls; see Committer.Commit for the result. A call whose
// deadline came (or whose parent ended) while it waited for a round returns an error wrapping
// groupcommit.ErrNotStored, one during its round an error wrapping ErrOutcomeUnknown. A
// parent that cannot end (Publish's) waits with Committer.CommitBy, which needs no context of
// its own; one that can (the Scheduler's) with a context of the deadline, whose end it
// follows. A call fenced at notAfterUs (> 0; see storeBatch) makes a script call of its own.
func (p *Publisher) commit(parent context.Context, deadline time.Time, part store.Partition, msgs []store.Outgoing, notAfterUs int64) (string, error) {
	var ctx context.Context
	if notAfterUs > 0 || parent.Done() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(parent, deadline)
		defer cancel()
	}
	if notAfterUs > 0 {
		return p.storeBatch(ctx, p.store, part, msgs, notAfterUs)
	}
	g, ok := p.queues.Load(part)
	if !ok {
		var loaded bool
		g, loaded = p.queues.LoadOrStore(part, groupcommit.New(func(ctx context.Context, batch []store.Outgoing) (string, error) {
			// The round's calls bound their own wait, and the round frees its slot at its
			// deadline (see groupcommit.Committer): the script runs on the round's goroutine.
			return p.storeBatch(ctx, p.store.Directly(), part, batch, 0)
		}, ErrOutcomeUnknown))
		if !loaded && p.queueCount.Add(1) > maxQueues {
			p.forgetIdleQueues()
		}
	}
	committer := g.(*groupcommit.Committer[store.Outgoing])
	if ctx == nil {
		return committer.CommitBy(parent, deadline, msgs)
	}
	return committer.Commit(ctx, msgs)
}

// maxQueues is how many topic partitions a Publisher keeps a groupcommit.Committer for before
// it forgets the idle ones.
const maxQueues = 10000

// forgetIdleQueues drops the Committers with nothing pending or under way. A call that loaded
// one just before still works on it: a Committer needs no map entry to store its rounds, the
// entry only lets concurrent calls share rounds.
func (p *Publisher) forgetIdleQueues() {
	p.queues.Range(func(key, g any) bool {
		if g.(*groupcommit.Committer[store.Outgoing]).Idle() && p.queues.CompareAndDelete(key, g) {
			p.queueCount.Add(-1)
		}
		return true
	})
}

// storeBatch runs the publish script for batch on topic partition part through st, for its
// registered consumer groups, bounded by ctx. The batch gets one call token, so that a script
// run that the client repeats stores nothing more. With notAfterUs > 0 the call is fenced: reaching
// Redis after that Unix time in µs (the Redis clock), it stores nothing and fails with an error
// wrapping store.ErrTooLate.
func (p *Publisher) storeBatch(ctx context.Context, st store.Store, part store.Partition, batch []store.Outgoing, notAfterUs int64) (string, error) {
	call := store.Call{Token: store.NewToken(), TTL: p.callTTL, Horizon: p.config.CompactHorizon, NotAfterUs: notAfterUs}
	var outcomes string
	err := p.groups.withGroups(ctx, part, func(ctx context.Context, groups []string) (err error) {
		outcomes, err = st.Publish(ctx, part, call, groups, batch)
		return err
	})
	return outcomes, err
}

// Close makes further Publish calls return ErrPublisherClosed and waits for the ones under way.
// It never closes the Redis client. It is idempotent and always returns nil.
func (p *Publisher) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	p.closed = true
	return nil
}

// byPartition groups the indexes of a batch by partition, keeping their order within each.
func byPartition(partitions []int) map[int][]int {
	out := map[int][]int{}
	for i, n := range partitions {
		out[n] = append(out[n], i)
	}
	return out
}

// publishFunc adapts a function to message.Publisher, so that delay.NewPublisher can wrap it.
type publishFunc func(topic string, msgs ...*message.Message) error

func (f publishFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }

func (f publishFunc) Close() error { return nil }
