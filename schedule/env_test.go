package schedule_test

// The environment of the Scheduler tests: a key prefix of its own on a backend, with its
// Schedulers, subscriptions and Inspector.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/schedule"
)

// schedWait bounds the waits of the schedule tests for an event (a tick acted on, a message
// received): generous, since a loaded CI machine with -race can be slow; a passing test waits
// only as long as the event takes.
const schedWait = 15 * time.Second

// schedulerEnv is a key prefix of its own on a backend, with the Publisher, Subscriber config
// and Inspector of that prefix.
type schedulerEnv struct {
	b      backend
	prefix string
}

func newSchedulerEnv(t *testing.T, b backend) schedulerEnv {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return schedulerEnv{b: b, prefix: "sched-" + name + ":"}
}

// scheduler returns a Scheduler closed when the test ends; edit adjusts its config.
func (e schedulerEnv) scheduler(t *testing.T, edit func(*schedule.Config)) *schedule.Scheduler {
	return e.schedulerOf(t, nil, edit)
}

// schedulerOf returns a Scheduler closed when the test ends, publishing through a Publisher of
// the env's prefix; editPub adjusts the Publisher's config, edit the Scheduler's.
func (e schedulerEnv) schedulerOf(t *testing.T, editPub func(*redisdelay.PublisherConfig), edit func(*schedule.Config)) *schedule.Scheduler {
	pcfg := redisdelay.PublisherConfig{Client: e.b.client, KeyPrefix: e.prefix}
	if editPub != nil {
		editPub(&pcfg)
	}
	pub, err := redisdelay.NewPublisher(pcfg, errorLogger{})
	require.NoError(t, err)
	cfg := schedule.Config{Publisher: pub, LeaseTimeout: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	s, err := schedule.New(cfg, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); _ = pub.Close() })
	return s
}

// run runs s until the test ends.
func (e schedulerEnv) run(t *testing.T, s *schedule.Scheduler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func (e schedulerEnv) subscribe(t *testing.T, topic, group string) <-chan *message.Message {
	sub := newSubscriber(t, e.b, func(c *redisdelay.SubscriberConfig) {
		c.KeyPrefix, c.ConsumerGroup = e.prefix, group
	})
	require.NoError(t, sub.SubscribeInitialize(topic))
	return subscribe(t, sub, topic)
}

func (e schedulerEnv) inspector(t *testing.T) *redisdelay.Inspector {
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: e.b.client, KeyPrefix: e.prefix}, nil)
	require.NoError(t, err)
	return in
}

// tickOf reads a tick message's nominal time.
func tickOf(t *testing.T, msg *message.Message) time.Time {
	tick, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.TickTimeMetadataKey))
	require.NoError(t, err, "tick time of %s", msg.UUID)
	return tick
}

// TestSchedulerPublishesEachTickOnceWithSeveralInstances runs three Schedulers on one
