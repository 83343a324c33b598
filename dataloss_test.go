package redisdelay_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// dataLoss is one way Redis loses a topic's data: a restart without persistence (the test
// servers have none), FLUSHALL, or, on the Cluster, the loss of the topic's hash slot (as when
// an empty replica takes a master's slots over): every key of the topic goes, the registry
// (in another slot) stays.
type dataLoss struct {
	name  string
	start func(t *testing.T) (b backend, lose func(topic string))
}

var dataLosses = []dataLoss{
	{"restart without persistence", func(t *testing.T) (backend, func(string)) {
		srv := redistest.Start(t, redistest.Options{})
		return backend{name: "redis", client: srv.Client(t)}, func(string) { require.NoError(t, srv.Restart()) }
	}},
	{"FLUSHALL", func(t *testing.T) (backend, func(string)) {
		b := realRedis(t)
		return b, func(string) { require.NoError(t, b.client.FlushAll(context.Background()).Err()) }
	}},
	{"cluster slot lost", func(t *testing.T) (backend, func(string)) {
		b := clusterBackend(t)
		return b, func(topic string) {
			ctx := context.Background()
			keys, err := scanKeys(ctx, b, "*{"+topic+"}*")
			require.NoError(t, err)
			require.NotEmpty(t, keys)
			// In one DEL (the topic's keys share its hash slot): deleted one by one, a claim
			// between two deletions could find the group's epoch gone and the ID counter still
			// there, which is what a removal leaves, and stop its subscription (CI saw it once).
			require.NoError(t, b.client.Del(ctx, keys...).Err())
		}
	}},
}

// forEachDataLoss runs f as a subtest per kind of data loss, each on a Redis of its own (the
// Cluster is shared: the topic, named after base, is new each time).
func forEachDataLoss(t *testing.T, base string, f func(t *testing.T, b backend, topic string, lose func())) {
	for _, loss := range dataLosses {
		t.Run(loss.name, func(t *testing.T) {
			b, lose := loss.start(t)
			topic := base + "." + watermill.NewShortUUID()
			f(t, b, topic, func() { lose(topic) })
		})
	}
}

// lossWatch is a Subscriber's metrics, to see when a subscription found its registration lost.
type lossWatch struct{ metrics *hookRecorder }

func newLossWatch(*testing.T) lossWatch { return lossWatch{metrics: newHookRecorder()} }

// lost returns how many times subscriptions of group on topic registered again after a loss.
func (w lossWatch) lost(_ *testing.T, topic, group string) int {
	return w.metrics.count(hook{"registration_lost", topic, group, ""})
}

// watched returns a config edit that counts into w and rechecks often, so that a subscription
// that sleeps finds a FLUSHALL soon.
func (w lossWatch) watched(c *redisdelay.SubscriberConfig) {
	c.Metrics = w.metrics
	c.RecheckInterval = 200 * time.Millisecond
}

// TestAStaleAckAfterADataLossLosesNoMessage: a subscription that held a message when Redis lost
// its data acks it after a new subscription of its group registered and new messages came;
// the ack is refused, the new subscription's lease stands, its nack makes its message due
// again, and every message published after the loss is handled.
func TestAStaleAckAfterADataLossLosesNoMessage(t *testing.T) {
	forEachDataLoss(t, "orders.stale-ack", func(t *testing.T, b backend, topic string, lose func()) {
		pub, watch := newPublisher(t, b), newLossWatch(t)
		oldSub := newSubscriber(t, b, watch.watched)
		oldCh := subscribe(t, oldSub, topic)
		publishNamed(t, pub, topic, "before", 1)
		stale := receive(t, oldCh, 5*time.Second)

		lose()
		freshCh := subscribe(t, newSubscriber(t, b, nil), topic)
		publishNamed(t, pub, topic, "after", 5)
		held := receive(t, freshCh, 5*time.Second)
		require.Contains(t, held.UUID, "after")

		ctx := context.Background()
		_, lease := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
		leased, err := b.client.ZRangeByScore(ctx, lease, &redis.ZRangeBy{Min: "-inf", Max: "(1e300"}).Result()
		require.NoError(t, err)
		require.Len(t, leased, 1, "the new subscription's lease of %s", held.UUID)

		require.True(t, stale.Ack())
		handled := collectAll(t, oldCh, freshCh)
		// The old subscription claims next: it finds its registration lost (the fix); or, before
		// the fix, its claim (same epoch again) or its ack on stopping (group "removed") takes
		// the new subscription's lease of the same ID away.
		require.Eventually(t, func() bool {
			return watch.lost(t, topic, redisdelay.DefaultConsumerGroup) >= 1 || handled.closed(0) ||
				b.client.ZScore(ctx, lease, leased[0]).Err() == redis.Nil
		}, 15*time.Second, 10*time.Millisecond, "the old subscription acts on the loss")
		assert.NoError(t, b.client.ZScore(ctx, lease, leased[0]).Err(), "the stale ack leaves the new lease alone")
		require.True(t, held.Nack())

		require.Eventually(t, func() bool { return len(handled.uuids()) >= 5 }, 15*time.Second, 5*time.Millisecond,
			"every message published after the loss is handled: %v", handled.uuids())
		got := handled.uuids()
		for i := range 5 {
			assert.Contains(t, got, "after-"+strconv.Itoa(i))
		}
	})
}

// publishNamed publishes n messages due at once, with UUIDs prefix-0, prefix-1, ...
func publishNamed(t *testing.T, pub *redisdelay.Publisher, topic, prefix string, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, pub.Publish(topic, message.NewMessage(prefix+"-"+strconv.Itoa(i), nil)))
	}
}

// collector acks every message of its channels until the test ends, and notes their UUIDs and
// which channels closed.
type collector struct {
	mu     sync.Mutex
	got    map[string]bool
	closes []bool
}

// collectAll starts a collector of chans.
func collectAll(t *testing.T, chans ...<-chan *message.Message) *collector {
	c := &collector{got: map[string]bool{}, closes: make([]bool, len(chans))}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	for i, ch := range chans {
		go func() {
			for {
				select {
				case msg, ok := <-ch:
					c.mu.Lock()
					if ok {
						msg.Ack()
						c.got[msg.UUID] = true
					} else {
						c.closes[i] = true
					}
					c.mu.Unlock()
					if !ok {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	return c
}

// closed reports whether the i-th channel closed.
func (c *collector) closed(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes[i]
}

// uuids returns the UUIDs of the messages collected so far.
func (c *collector) uuids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.got))
	for id := range c.got {
		out = append(out, id)
	}
	return out
}

// TestARouterKeepsHandlingAfterRedisLostItsData: a Watermill Router that runs a redisdelay
// handler beside another handler keeps both running when Redis loses its data: the
// subscription registers its group again, counts the loss, writes the topic registry again,
// and handles every message published after the loss.
func TestARouterKeepsHandlingAfterRedisLostItsData(t *testing.T) {
	forEachDataLoss(t, "billing.after-loss", func(t *testing.T, b backend, topic string, lose func()) {
		watch := newLossWatch(t)
		handled := make(chan string, 100)
		runErr := runRouter(t, newSubscriber(t, b, watch.watched), topic, handled)
		pub := newPublisher(t, b)
		publishNamed(t, pub, topic, "before", 1)
		require.Equal(t, "before-0", receiveUUID(t, handled))

		lose()
		publishNamed(t, pub, topic, "after", 10)
		got := map[string]bool{}
		for len(got) < 10 {
			got[receiveUUID(t, handled)] = true
		}
		for i := range 10 {
			assert.True(t, got["after-"+strconv.Itoa(i)], "after-%d handled", i)
		}
		select {
		case err := <-runErr:
			t.Fatalf("the Router stopped: %v", err)
		default:
		}
		assert.EqualValues(t, 1, watch.lost(t, topic, redisdelay.DefaultConsumerGroup), "the loss is counted once")
		topics, err := newInspector(t, b, 1).Topics(context.Background())
		require.NoError(t, err)
		i := slices.IndexFunc(topics, func(info redisdelay.TopicInfo) bool { return info.Topic == topic })
		require.GreaterOrEqual(t, i, 0, "the topic registry is written again: %v", topics)
		assert.Equal(t, []string{redisdelay.DefaultConsumerGroup}, topics[i].Groups)
	})
}

// runRouter runs a Router with a handler of topic on sub, which sends each message's UUID to
// handled, beside a handler on a Go channel, until the test ends. It returns what Run returns.
func runRouter(t *testing.T, sub *redisdelay.Subscriber, topic string, handled chan<- string) <-chan error {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{}, errorLogger{})
	require.NoError(t, err)
	router.AddNoPublisherHandler("redisdelay", topic, sub, func(msg *message.Message) error {
		handled <- msg.UUID
		return nil
	})
	other := gochannel.NewGoChannel(gochannel.Config{}, errorLogger{})
	router.AddNoPublisherHandler("other", "other", other, func(*message.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runErr
	})
	select {
	case <-router.Running():
	case <-time.After(5 * time.Second):
		t.Fatal("the Router did not start")
	}
	return runErr
}

// receiveUUID waits up to 15 s for a handled message's UUID.
func receiveUUID(t *testing.T, handled <-chan string) string {
	t.Helper()
	select {
	case id := <-handled:
		return id
	case <-time.After(15 * time.Second):
		t.Fatal("no message handled within 15 s")
		return ""
	}
}
