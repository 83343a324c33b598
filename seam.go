package redisdelay

// This file lets package schedule use a Publisher's commit path and an Inspector's Redis layer
// through internal/seam, without a public API: the Scheduler is a client of the Publisher, as
// asynq's Scheduler is of its Client. See docs/development.md, "Where the code lives".

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-redisdelay/redisdelay/internal/seam"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

func init() {
	seam.PublisherOf = func(p any) seam.Publisher {
		if pub, ok := p.(*Publisher); ok && pub != nil {
			return publisherSeam{pub}
		}
		return nil
	}
	seam.InspectorOf = func(in any) seam.Inspector {
		if i, ok := in.(*Inspector); ok && i != nil {
			return inspectorSeam{i}
		}
		return nil
	}
	seam.CheckName, seam.CheckAhead = checkName, checkAhead
}

// publisherSeam is a Publisher as package schedule sees it.
type publisherSeam struct{ p *Publisher }

func (s publisherSeam) Check(topic string, msg *message.Message) error {
	_, _, err := s.p.outgoing(topic, msg, s.p.clock.Now(), s.p.clock.Virtual(), 0)
	return err
}

func (s publisherSeam) Marshal(topic string, msg *message.Message) ([]byte, error) {
	return s.p.marshalOutgoing(topic, msg)
}

// Publish holds the Publisher open, as PublishWithResult does: after Close it returns
// ErrPublisherClosed.
func (s publisherSeam) Publish(ctx context.Context, topic string, msgs []*message.Message, o seam.PublishOptions) (int, error) {
	s.p.closeMu.RLock()
	defer s.p.closeMu.RUnlock()
	if s.p.closed {
		return 0, ErrPublisherClosed
	}
	outcomes, err := s.p.publishWith(ctx, topic, msgs, o)
	duplicates := 0
	for _, o := range outcomes {
		if o == OutcomeDuplicate {
			duplicates++
		}
	}
	return duplicates, err
}

func (s publisherSeam) Store() store.Store { return s.p.store }

func (s publisherSeam) WithGroups(ctx context.Context, part store.Partition, try func(ctx context.Context, groups []string) error) error {
	return s.p.groups.withGroups(ctx, part, try)
}

func (s publisherSeam) Call() store.Call {
	return store.Call{Token: store.NewToken(), TTL: s.p.callTTL}
}

func (s publisherSeam) EnsureTopic(ctx context.Context, topic string, partitions int, logger watermill.LoggerAdapter) error {
	return s.p.topics.ensure(ctx, s.p.store, topic, partitions, logger)
}

func (s publisherSeam) KeyPartition(key string) int { return keyPartition(key, s.p.config.Partitions) }

func (s publisherSeam) OperationTimeout() time.Duration { return s.p.config.OperationTimeout }

func (s publisherSeam) Client() redis.UniversalClient { return s.p.config.Client }

func (s publisherSeam) KeyPrefix() string { return s.p.config.KeyPrefix }

// NewSubscriber returns a Subscriber of the Publisher's client, key prefix, operation timeout
// and metrics, with unlimited attempts.
func (s publisherSeam) NewSubscriber(o seam.SubscriberOptions, logger watermill.LoggerAdapter) (message.Subscriber, error) {
	return NewSubscriber(SubscriberConfig{
		Client:           s.p.config.Client,
		KeyPrefix:        s.p.config.KeyPrefix,
		ConsumerGroup:    o.ConsumerGroup,
		Consumer:         o.Consumer,
		LeaseTimeout:     o.LeaseTimeout,
		NackBackoff:      ConstantBackoff(o.NackDelay),
		MaxAttempts:      UnlimitedAttempts,
		OperationTimeout: s.p.config.OperationTimeout,
		ClaimBatchSize:   o.ClaimBatchSize,
		Metrics:          s.p.config.Metrics,
		WorkerHeartbeat:  o.WorkerHeartbeat,
		kind:             WorkerKind(o.Kind),
	}, logger)
}

// inspectorSeam is an Inspector as package schedule sees it.
type inspectorSeam struct{ in *Inspector }

func (s inspectorSeam) Store() store.Store { return s.in.store }

func (s inspectorSeam) OperationTimeout() time.Duration { return s.in.config.OperationTimeout }

func (s inspectorSeam) ListLimit(limit int) int { return listLimit(limit) }

func (s inspectorSeam) Client() redis.UniversalClient { return s.in.config.Client }

func (s inspectorSeam) KeyPrefix() string { return s.in.config.KeyPrefix }
