package redisdelay_test

import (
	"context"
	"log"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// backend is a Redis the tests run against.
type backend struct {
	name   string
	client redis.UniversalClient
	// miniredis is the embedded server, whose keys expire only when told that time passed
	// (FastForward); nil for the other backends.
	miniredis *miniredis.Miniredis
}

// realRedis starts a dedicated redis-server for the test.
func realRedis(t *testing.T) backend {
	srv := redistest.Start(t, redistest.Options{})
	return backend{name: "redis", client: srv.Client(t)}
}

// embeddedRedis starts a miniredis server for the test.
func embeddedRedis(t *testing.T) backend {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return backend{name: "miniredis", client: c, miniredis: mr}
}

// forEachBackend runs f as a parallel subtest against a real redis-server, miniredis and a
// Redis Cluster of 3 masters and 3 replicas with REDISDELAY_LONG=1 (as CI does), and against
// redistest.OneBackend only in the quick run.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, be := range []struct {
		name  string
		start func(*testing.T) backend
	}{{"redis", realRedis}, {"miniredis", embeddedRedis}, {"cluster", clusterBackend}} {
		if one := redistest.OneBackend(); one != "" && be.name != one {
			continue // the quick run: one backend (REDISDELAY_LONG=1 runs them all)
		}
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, be.start(t))
		})
	}
}

// errorLogger logs only errors, so that test output stays readable.
type errorLogger struct{ fields watermill.LogFields }

func (l errorLogger) Error(msg string, err error, fields watermill.LogFields) {
	log.Printf("ERROR %s: %v %v %v", msg, err, l.fields, fields)
}
func (l errorLogger) Info(string, watermill.LogFields)  {}
func (l errorLogger) Debug(string, watermill.LogFields) {}
func (l errorLogger) Trace(string, watermill.LogFields) {}
func (l errorLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return errorLogger{fields: l.fields.Add(fields)}
}

// newPublisher returns a Publisher closed when the test ends.
func newPublisher(t *testing.T, b backend) *redisdelay.Publisher {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client}, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// newSubscriber returns a Subscriber closed when the test ends; edit adjusts its config.
func newSubscriber(t *testing.T, b backend, edit func(*redisdelay.SubscriberConfig)) *redisdelay.Subscriber {
	cfg := redisdelay.SubscriberConfig{Client: b.client, NackBackoff: redisdelay.ConstantBackoff(0)}
	if edit != nil {
		edit(&cfg)
	}
	sub, err := redisdelay.NewSubscriber(cfg, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// subscribe subscribes sub to topic until the test ends (or sub is closed).
func subscribe(t *testing.T, sub *redisdelay.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	return ch
}

// receive waits up to timeout for one message.
func receive(t *testing.T, ch <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "channel closed")
		return msg
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
		return nil
	}
}

// drainTimeout bounds the waits of waitStats: what a group holds settles within it.
const drainTimeout = 5 * time.Second

// waitStats waits until the stats of consumer group on topic satisfy ok, and returns them. It
// fails the test after drainTimeout, naming what is awaited (what) and the last stats seen.
func waitStats(t *testing.T, in *redisdelay.Inspector, topic, group, what string, ok func(redisdelay.GroupStats) bool) redisdelay.GroupStats {
	t.Helper()
	deadline := time.Now().Add(drainTimeout)
	for {
		s := statsOf(t, in, topic, group)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s on topic %s: not %s within %s: %+v", group, topic, what, drainTimeout, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitDrained waits until consumer group holds nothing of topic: nothing scheduled, due or in
// flight, every ack confirmed to Redis. A subscription hands out only what its group holds, so
// once this holds, and nothing more is published, nothing more arrives: where a test would
// watch a channel for a while and hope, this shows it by state.
func waitDrained(t *testing.T, in *redisdelay.Inspector, topic, group string) {
	t.Helper()
	waitStats(t, in, topic, group, "drained", func(s redisdelay.GroupStats) bool { return s.Scheduled+s.Due+s.InFlight == 0 })
}

// scanKeys returns the keys matching pattern (SCAN MATCH), sorted, scanning every master of a
// cluster.
func scanKeys(ctx context.Context, b backend, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, b.client)
	}
	sort.Strings(keys)
	return keys, err
}

func newInspector(t *testing.T, b backend, partitions int) *redisdelay.Inspector {
	in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, Partitions: partitions}, errorLogger{})
	require.NoError(t, err)
	return in
}

func statsOf(t *testing.T, in *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	t.Helper()
	all, err := in.Stats(context.Background(), topic)
	require.NoError(t, err)
	for _, s := range all {
		if s.Group == group {
			return s
		}
	}
	t.Fatalf("no stats for group %s on topic %s in %+v", group, topic, all)
	return redisdelay.GroupStats{}
}

// publishDelayed publishes n messages due after d, with UUIDs prefix0..prefix(n-1).
func publishDelayed(t *testing.T, pub *redisdelay.Publisher, topic, prefix string, n int, d time.Duration) {
	t.Helper()
	var msgs []*message.Message
	for i := range n {
		msg := message.NewMessage(prefix+strconv.Itoa(i), []byte("payload of "+prefix+strconv.Itoa(i)))
		if d > 0 {
			delay.Message(msg, delay.For(d))
		}
		msgs = append(msgs, msg)
	}
	require.NoError(t, pub.Publish(topic, msgs...))
}

// outcome is the outcome of a Cancel by ref, in the ref's group.
func outcome(r redisdelay.ActionResult, err error) (redisdelay.Outcome, error) {
	o, _, err := refOutcome(r, err)
	return o, err
}

// refOutcome is the outcome of an action by ref, in the ref's group, and the new due time.
func refOutcome(r redisdelay.ActionResult, err error) (redisdelay.Outcome, time.Time, error) {
	for _, o := range r.Groups {
		return o, r.DueAt, err
	}
	return 0, r.DueAt, err
}

// batchItems is how many items the open batch of an action by batch key held.
func batchItems(r redisdelay.ActionResult, err error) (int, error) {
	return r.BatchItems, err
}
