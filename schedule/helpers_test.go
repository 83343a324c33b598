package schedule_test

// The test helpers of package schedule: the backends (a redis-server, miniredis, the shared
// Redis Cluster), a quiet logger, subscriptions, key scans and script faults. They are the
// root package's test helpers cut down to what these tests use.

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
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

// shared is the Redis Cluster the tests of this package share, started on first use.
var shared struct {
	once    sync.Once
	cluster *redistest.Cluster
	err     error
}

// clusterBackend is the shared Redis Cluster (3 masters, 3 replicas) behind a ClusterClient of
// the test's own. It skips t when redis-server or redis-cli is missing.
func clusterBackend(t *testing.T) backend {
	t.Helper()
	redistest.SkipIfNotInstalled(t)
	shared.once.Do(func() { shared.cluster, shared.err = redistest.NewCluster(redistest.ClusterOptions{}) })
	if shared.err != nil {
		t.Fatalf("start the shared Redis Cluster: %v", shared.err)
	}
	return backend{name: "cluster", client: shared.cluster.Client(t)}
}

// TestMain runs the child of the kill test when asked to, and stops the shared Redis Cluster,
// if a test started it, once every test has run.
func TestMain(m *testing.M) {
	runSchedulerChild()
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	redistest.ReportSkips()
	os.Exit(code)
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

// scriptFault is a go-redis hook that runs the script calls whose keys match through around.
type scriptFault struct {
	match func(keys []string) bool
	// around runs the matched command; next runs it once on the server.
	around func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

func (f scriptFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f scriptFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f scriptFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		name := strings.ToLower(cmd.Name())
		if (name == "evalsha" || name == "eval") && len(args) > 3 {
			n, _ := args[2].(int)
			keys := make([]string, 0, n)
			for _, k := range args[3 : 3+n] {
				s, _ := k.(string)
				keys = append(keys, s)
			}
			if f.match(keys) {
				return f.around(ctx, cmd, next)
			}
		}
		return next(ctx, cmd)
	}
}

func isPublishCall(keys []string) bool { return strings.Contains(keys[0], ":call:") }

// faultyClient returns a new client on b's Redis with the hook installed.
func faultyClient(t *testing.T, b backend, hook redis.Hook) redis.UniversalClient {
	c, ok := b.client.(*redis.Client)
	if !ok {
		panic(fmt.Sprintf("faultyClient: unsupported client %T", b.client))
	}
	fc := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	t.Cleanup(func() { _ = fc.Close() })
	fc.AddHook(hook)
	return fc
}

// violation is one break of the model's rules found by a sequence.
type violation struct{ kind, text string }

// kinds names the kinds of vs, sorted, comma-separated.
func kinds(vs []violation) string {
	set := map[string]bool{}
	for _, v := range vs {
		set[v.kind] = true
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// envInt reads an integer environment variable, def when it is unset or not an integer.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
