//go:build chaos

package chaostest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(consumerChildEnv); spec != "" {
		runConsumerChild(spec) // never returns
	}
	code := m.Run()
	redistest.ReportSkips()
	os.Exit(code)
}

// Timeouts shared by the scenarios: short enough that a fault of a few seconds spans several
// leases and several operation timeouts.
const (
	leaseTimeout     = time.Second
	operationTimeout = time.Second
	// recheckInterval bounds how long a subscription that lost a wake-up during a fault sleeps.
	recheckInterval = 2 * time.Second
	// drainTimeout bounds the wait, after the load stopped, for every acknowledged message.
	drainTimeout = 30 * time.Second
)

// faultProxy is a toxiproxy TCP proxy, run in this process, between the clients and one Redis.
// Only the proxy itself runs: toxiproxy's HTTP API server (port 8474 by default) is never
// started, and the proxy listens on a free port of 127.0.0.1.
type faultProxy struct {
	proxy *toxiproxy.Proxy
	Addr  string
}

func startProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "redis", "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &faultProxy{proxy: p, Addr: p.Listen}
}

// addToxic adds a toxic to one stream ("upstream": client to Redis, "downstream": Redis to
// client).
func (f *faultProxy) addToxic(name, kind, stream string, attributes map[string]any) {
	body, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes})
	if err != nil {
		panic(err)
	}
	if _, err := f.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		panic(fmt.Sprintf("chaostest: add toxic %s: %v", name, err))
	}
}

func (f *faultProxy) removeToxic(name string) {
	if err := f.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		panic(fmt.Sprintf("chaostest: remove toxic %s: %v", name, err))
	}
}

// both adds the same toxic to both streams and returns the function that removes them.
func (f *faultProxy) both(name, kind string, attributes map[string]any) (remove func()) {
	f.addToxic(name+"_up", kind, "upstream", attributes)
	f.addToxic(name+"_down", kind, "downstream", attributes)
	return func() {
		f.removeToxic(name + "_up")
		f.removeToxic(name + "_down")
	}
}

// blackhole drops every byte in both directions while the connections stay open (toxiproxy's
// timeout toxic with timeout 0). Removing it closes the connections that carried traffic
// meanwhile, as toxiproxy's timeout toxic does on cleanup.
func (f *faultProxy) blackhole() (heal func()) {
	return f.both("blackhole", "timeout", map[string]any{"timeout": 0})
}

// stall holds every byte in both directions (a latency toxic of an hour) and, when healed,
// delivers what it held, in order, on the same connections: a freeze that loses nothing, as a
// network partition that TCP rides out, or a paused server.
func (f *faultProxy) stall() (heal func()) {
	return f.both("stall", "latency", map[string]any{"latency": time.Hour.Milliseconds()})
}

// latency delays every byte by d in each direction.
func (f *faultProxy) latency(d time.Duration) (heal func()) {
	return f.both("latency", "latency", map[string]any{"latency": d.Milliseconds()})
}

// resetAll breaks every connection once. For 100 ms each connection that receives a reply
// from Redis is cut and the reply dropped (toxiproxy's reset_peer toxic): the request ran, the
// client sees only the broken connection, and go-redis sends it again on a new connection
// (which is cut too while the window lasts).
// Then the proxy is restarted on the same address, which closes every remaining connection,
// idle ones included.
func (f *faultProxy) resetAll() {
	f.addToxic("reset", "reset_peer", "downstream", map[string]any{"timeout": 0})
	time.Sleep(100 * time.Millisecond)
	f.proxy.Stop()
	f.removeToxic("reset")
	if err := f.proxy.Start(); err != nil {
		panic(fmt.Sprintf("chaostest: restart proxy on %s: %v", f.Addr, err))
	}
}

// newClient returns a go-redis client with default options for addr, closed when the test ends.
func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// infoField returns one numeric field of INFO section from the server at addr.
func infoField(t *testing.T, addr, section, field string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, section).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, _ := strings.Cut(line, ":"); k == field {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "INFO %s %s", section, field)
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// connectionsAccepted returns how many connections the server at addr has accepted so far.
func connectionsAccepted(t *testing.T, addr string) int64 {
	return infoField(t, addr, "stats", "total_connections_received")
}

// newPublisher returns a Publisher with operationTimeout, closed when the test ends.
func newPublisher(t *testing.T, client redis.UniversalClient, logger watermill.LoggerAdapter, edit func(*redisdelay.PublisherConfig)) *redisdelay.Publisher {
	t.Helper()
	cfg := redisdelay.PublisherConfig{Client: client, OperationTimeout: operationTimeout}
	if edit != nil {
		edit(&cfg)
	}
	pub, err := redisdelay.NewPublisher(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// newSubscriber returns a Subscriber of group with the suite's lease and timeouts, closed when
// the test ends.
func newSubscriber(t *testing.T, client redis.UniversalClient, group string, logger watermill.LoggerAdapter, edit func(*redisdelay.SubscriberConfig)) *redisdelay.Subscriber {
	t.Helper()
	cfg := redisdelay.SubscriberConfig{
		Client:           client,
		ConsumerGroup:    group,
		LeaseTimeout:     leaseTimeout,
		OperationTimeout: operationTimeout,
		RecheckInterval:  recheckInterval,
		NackBackoff:      redisdelay.ConstantBackoff(0),
		MaxAttempts:      redisdelay.UnlimitedAttempts,
	}
	if edit != nil {
		edit(&cfg)
	}
	sub, err := redisdelay.NewSubscriber(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// newTopic returns a topic name of its own, short enough to appear whole in error messages.
func newTopic() string {
	return "chaos." + watermill.NewShortUUID()
}

// newMessage returns a message with a unique UUID and, when d > 0, delay metadata set the way
// Watermill's delay.For does.
func newMessage(d time.Duration, payload []byte) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload)
	if d > 0 {
		delay.Message(msg, delay.For(d))
	}
	return msg
}

// load publishes from several goroutines until stopped, at a steady pace, bounded in count and
// in time. Each call publishes 1 to 3 messages; half of the messages are delayed by 0-500 ms.
type load struct {
	ledger     *ledger
	pub        message.Publisher
	topic      string
	publishers int
	interval   time.Duration // between calls of one publisher
	maxCalls   int           // per publisher
	maxTime    time.Duration // after which every publisher stops by itself
	payload    []byte

	stop chan struct{}
	wg   sync.WaitGroup
	done atomic.Int64 // calls made
}

func (l *load) start() *load {
	l.stop = make(chan struct{})
	deadline := time.Now().Add(l.maxTime)
	for range l.publishers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(l.interval)
			defer tick.Stop()
			for range l.maxCalls {
				if time.Now().After(deadline) {
					return
				}
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				l.publishOnce()
			}
		}()
	}
	return l
}

func (l *load) publishOnce() {
	n := 1 + rand.IntN(3)
	start := time.Now()
	msgs := make([]*message.Message, n)
	delays := make([]time.Duration, n)
	for i := range msgs {
		if rand.IntN(2) == 0 {
			delays[i] = time.Duration(rand.IntN(501)) * time.Millisecond
		}
		msgs[i] = newMessage(delays[i], l.payload)
	}
	_ = l.ledger.publish(l.pub, l.topic, start, delays, msgs...)
	l.done.Add(1)
}

// halt stops the publishers and waits for the calls under way, each bounded by its
// OperationTimeout.
func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// cappedLogger logs the first few errors of a scenario to stderr and counts the rest: under
// faults the adapter logs every failed Redis call, by design.
type cappedLogger struct {
	name   string
	fields watermill.LogFields
	count  *atomic.Int64
}

const loggedErrors = 10

func newLogger(name string) cappedLogger {
	return cappedLogger{name: name, count: new(atomic.Int64)}
}

func (l cappedLogger) Error(msg string, err error, fields watermill.LogFields) {
	if n := l.count.Add(1); n <= loggedErrors {
		log.Printf("%s: adapter logged error %d: %s: %v %v", l.name, n, msg, err, l.fields.Add(fields))
	}
}
func (l cappedLogger) Info(msg string, fields watermill.LogFields)  { l.verbose("info", msg, fields) }
func (l cappedLogger) Debug(msg string, fields watermill.LogFields) { l.verbose("debug", msg, fields) }
func (l cappedLogger) Trace(string, watermill.LogFields)            {}

// verboseEnv set to 1 makes the adapter's info and debug logs appear too, for debugging.
const verboseEnv = "CHAOSTEST_VERBOSE"

var verbose = os.Getenv(verboseEnv) == "1"

func (l cappedLogger) verbose(level, msg string, fields watermill.LogFields) {
	if verbose {
		log.Printf("%s: adapter %s: %s %v", l.name, level, msg, l.fields.Add(fields))
	}
}
func (l cappedLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return cappedLogger{name: l.name, fields: l.fields.Add(fields), count: l.count}
}

// Errors returns how many errors the adapter logged.
func (l cappedLogger) Errors() int64 { return l.count.Load() }

// short picks the figure for -short (CI) or the full run.
func short[T any](shortValue, fullValue T) T {
	if testing.Short() {
		return shortValue
	}
	return fullValue
}
