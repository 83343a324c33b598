//go:build chaos

package chaostest

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// Scenario 1. Publishers and subscribers reach Redis through a fault proxy while a steady load
// runs; the proxy freezes, slows down or resets the traffic for a few seconds.
func TestNoAcknowledgedMessageIsLostEarlyOrStoredTwiceUnderProxyFaults(t *testing.T) {
	for _, fault := range []struct {
		name       string
		inject     func(p *faultProxy)
		reconnects bool // the fault closes connections, so the clients must reconnect
	}{
		{"freeze-stall", func(p *faultProxy) { // bytes held for 2 leases, then delivered
			heal := p.stall()
			time.Sleep(2 * leaseTimeout)
			heal()
		}, false},
		{"freeze-blackhole", func(p *faultProxy) { // bytes dropped for 2 leases, then connections closed
			heal := p.blackhole()
			time.Sleep(2 * leaseTimeout)
			heal()
		}, true},
		{"latency-50ms", func(p *faultProxy) {
			heal := p.latency(50 * time.Millisecond)
			time.Sleep(short(3*time.Second, 6*time.Second))
			heal()
		}, false},
		{"reset-every-second", func(p *faultProxy) {
			for range short(3, 5) {
				p.resetAll()
				time.Sleep(time.Second - 100*time.Millisecond)
			}
		}, true},
	} {
		t.Run(fault.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			proxy := startProxy(t, srv.Addr)
			logger := newLogger(t.Name())
			topic, group := newTopic(), "chaos"

			var consumers sync.WaitGroup
			l := newLedger()
			subs := make([]*redisdelay.Subscriber, 2)
			for i := range subs {
				subs[i] = newSubscriber(t, newClient(t, proxy.Addr), group, logger, nil)
				require.NoError(t, subs[i].SubscribeInitialize(topic))
				ch, err := subs[i].Subscribe(context.Background(), topic)
				require.NoError(t, err)
				consumers.Add(1)
				go func() { defer consumers.Done(); l.consume(ch) }()
			}
			pub := newPublisher(t, newClient(t, proxy.Addr), logger, nil)
			run := (&load{
				ledger: l, pub: pub, topic: topic, publishers: 4,
				interval: 5 * time.Millisecond, maxCalls: 5000, maxTime: time.Minute,
				payload: make([]byte, 100),
			}).start()

			time.Sleep(time.Second) // steady state before the fault
			connectionsBefore := connectionsAccepted(t, srv.Addr)
			fault.inject(proxy)
			healed := time.Now()
			time.Sleep(time.Second) // load goes on after the fault
			run.halt()

			missing := l.waitAllStoredDelivered(drainTimeout)
			for _, sub := range subs {
				require.NoError(t, sub.Close())
			}
			consumers.Wait()

			s := l.report(t, "proxy/"+fault.name)
			reconnects := connectionsAccepted(t, srv.Addr) - connectionsBefore - 1 // not counting ours
			t.Logf("adapter logged %d errors; Redis accepted %d connections from the fault on; %d publishes started after the fault was healed were acknowledged",
				logger.Errors(), reconnects, l.storedSince(healed))
			if fault.reconnects {
				assert.GreaterOrEqual(t, reconnects, int64(3), "the fault broke no connection")
			}
			assert.Zero(t, missing, "acknowledged messages still undelivered %s after the load stopped", drainTimeout)
			assert.Positive(t, l.storedSince(healed), "no Publish succeeded in the second after the fault was healed")
			assert.Positive(t, s.acknowledged, "the load published nothing")
		})
	}
}

// Scenario 2. While Redis does not answer, 64 concurrent Publish calls and then
// Subscriber.Close each return within OperationTimeout + 100 ms, Publish with an error.
func TestCallsReturnWithinOperationTimeoutWhileRedisIsFrozen(t *testing.T) {
	const publishers = 64
	const bound = operationTimeout + 100*time.Millisecond
	for _, freeze := range []struct {
		name string
		// start returns the address clients use and the function that freezes Redis, which
		// returns the function that thaws it.
		start func(t *testing.T) (addr string, freeze func() (thaw func()))
	}{
		{"proxy-blackhole", func(t *testing.T) (string, func() func()) {
			p := startProxy(t, redistest.Start(t, redistest.Options{}).Addr)
			return p.Addr, p.blackhole
		}},
		{"proxy-stall", func(t *testing.T) (string, func() func()) {
			p := startProxy(t, redistest.Start(t, redistest.Options{}).Addr)
			return p.Addr, p.stall
		}},
		{"sigstop", func(t *testing.T) (string, func() func()) {
			srv := redistest.Start(t, redistest.Options{})
			return srv.Addr, func() func() {
				require.NoError(t, srv.Signal(syscall.SIGSTOP))
				return func() { _ = srv.Signal(syscall.SIGCONT) }
			}
		}},
	} {
		t.Run(freeze.name, func(t *testing.T) {
			addr, freezeRedis := freeze.start(t)
			logger := newLogger(t.Name())
			client := newClient(t, addr)
			topic := newTopic()
			pub := newPublisher(t, client, logger, nil)
			sub := newSubscriber(t, client, "chaos", logger, func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = 10 * time.Second })

			// A running service: the group is registered, a message was acked (its ack may be
			// waiting to be confirmed) and one is held, both to be dealt with by Close.
			require.NoError(t, sub.SubscribeInitialize(topic))
			for range 5 {
				require.NoError(t, pub.Publish(topic, newMessage(0, nil)))
			}
			ch, err := sub.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			receive(t, ch, 5*time.Second).Ack()
			receive(t, ch, 5*time.Second) // held, never acked

			thaw := sync.OnceFunc(freezeRedis())
			t.Cleanup(thaw)

			l := newLedger()
			type result struct {
				err     error
				latency time.Duration
			}
			results := make([]result, publishers)
			var wg sync.WaitGroup
			begin := make(chan struct{})
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-begin
					start := time.Now()
					err := l.publish(pub, topic, start, []time.Duration{0}, newMessage(0, nil))
					results[i] = result{err: err, latency: time.Since(start)}
				}()
			}
			close(begin)
			waitGroupWithin(t, &wg, 30*time.Second, "the Publish calls")

			var slowest time.Duration
			over, succeeded := 0, 0
			for _, r := range results {
				slowest = max(slowest, r.latency)
				if r.latency > bound {
					over++
				}
				if r.err == nil {
					succeeded++
				}
			}

			closeStart := time.Now()
			closed := make(chan struct{})
			go func() { _ = sub.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Fatal("Subscriber.Close did not return within 30s while Redis was frozen")
			}
			closeLatency := time.Since(closeStart)
			select {
			case _, open := <-ch:
				assert.False(t, open, "a message came out after Close returned")
			default:
				t.Error("the output channel is still open after Close returned")
			}
			thaw()

			// After the thaw, only the calls that said ErrOutcomeUnknown may have stored their
			// message. Once no Redis call of the client is under way any more, a marker published
			// now comes after every message those calls stored (all are due at once).
			waitPoolIdle(t, client, 10*time.Second)
			marker := newMessage(0, nil)
			require.NoError(t, l.publish(pub, topic, time.Now(), []time.Duration{0}, marker), "Publish after the thaw")
			drain := newSubscriber(t, client, "chaos", logger, nil)
			drainCh, err := drain.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			for i := 0; ; i++ {
				require.Less(t, i, maxReceives, "the marker did not come within %d messages", maxReceives)
				msg := receive(t, drainCh, 15*time.Second)
				if _, ours := l.publication(msg.UUID); ours { // the warm-up messages come back later
					l.deliver(msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now())
				}
				msg.Ack()
				if msg.UUID == marker.UUID {
					break
				}
			}
			require.NoError(t, drain.Close())

			s := l.report(t, "frozen/"+freeze.name)
			t.Logf("frozen/%s: %d of %d Publish calls over %s (slowest %s), Subscriber.Close took %s",
				freeze.name, over, publishers, bound, slowest.Round(time.Millisecond), closeLatency.Round(time.Millisecond))
			assert.Zero(t, over, "Publish calls took longer than OperationTimeout + 100 ms (slowest %s)", slowest)
			assert.Zero(t, succeeded, "Publish calls returned nil while Redis was frozen")
			assert.Equal(t, 1, s.acknowledged, "only the marker was acknowledged")
			assert.LessOrEqual(t, closeLatency, bound, "Subscriber.Close took longer than OperationTimeout + 100 ms")
		})
	}
}

// waitPoolIdle waits until no command of c is under way (abandoned calls finish within the
// client's read timeout), failing the test after timeout.
func waitPoolIdle(t *testing.T, c *redis.Client, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := c.PoolStats()
		if st.TotalConns == st.IdleConns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis calls still under way %s after the thaw: %+v", timeout, *st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// maxReceives bounds the loops that receive until a marker message.
const maxReceives = 10000

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

// waitGroupWithin waits for wg, failing the test after timeout.
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s did not return within %s", what, timeout)
	}
}
