package redisdelay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// scriptFault is a go-redis hook that acts on the script calls whose keys contain a marker: a
// publish call carries ":call:" in its first key, a claim ":claim:" in its fifth.
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
func isClaimCall(keys []string) bool   { return len(keys) >= 8 && strings.Contains(keys[4], ":claim:") }

// faultyClient returns a new client like b's with the hook installed.
func faultyClient(t *testing.T, b backend, hook redis.Hook) redis.UniversalClient {
	c := newClientLike(b)
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	return c
}

func TestPublishScriptThatRunsTwiceStoresOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var reruns atomic.Int64
		client := faultyClient(t, b, scriptFault{match: isPublishCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			// What go-redis does when a reply is lost: the same command runs again.
			if err := next(ctx, cmd); err != nil {
				return err
			}
			reruns.Add(1)
			return next(ctx, cmd)
		}})
		topic := newTopic()
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, errorLogger{})
		require.NoError(t, err)
		const n = 20
		for i := range n {
			require.NoError(t, pub.Publish(topic, message.NewMessage(string(rune('a'+i)), nil)))
		}
		require.GreaterOrEqual(t, reruns.Load(), int64(n/4), "the hook must have run publish scripts twice")
		in := newInspector(t, b, 1)
		assert.Equal(t, int64(n), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).Due, "each message stored once")

		ch := subscribe(t, sub, topic)
		seen := map[string]int{}
		for range n {
			msg := receive(t, ch, 5*time.Second)
			seen[msg.UUID]++
			msg.Ack()
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Len(t, seen, n, "every message once")
	})
}

func TestPublishWhoseReplyIsLostReportsOutcomeUnknown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		client := faultyClient(t, b, scriptFault{match: isPublishCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			if _, stored := cmd.(*redis.Cmd).Val().(string); !stored {
				return nil // a stale view of the groups; nothing was stored
			}
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}})
		topic := newTopic()
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, errorLogger{})
		require.NoError(t, err)
		err = pub.Publish(topic, message.NewMessage("lost-reply", nil))
		require.ErrorIs(t, err, redisdelay.ErrOutcomeUnknown)
		assert.Contains(t, err.Error(), topic)
		// It did run: the message is stored, once, and arrives.
		in := newInspector(t, b, 1)
		assert.Equal(t, int64(1), statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).Due)
		ch := subscribe(t, sub, topic)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, "lost-reply", msg.UUID)
		msg.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
	})
}

// leasedBy returns how many messages the claim cmd leased, from claim.lua's reply: 7 values,
// then 4 per leased message; 0 when it failed.
func leasedBy(cmd redis.Cmder) int {
	reply, _ := cmd.(*redis.Cmd).Val().([]any)
	if cmd.Err() != nil || len(reply) < 7 {
		return 0
	}
	return (len(reply) - 7) / 4
}

// loseClaimReplies is a fault that loses the replies of the first n claims that leased
// messages: the claim ran, but its caller sees io.EOF. dropped counts them.
func loseClaimReplies(n int64, dropped *atomic.Int64) scriptFault {
	return scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && leasedBy(cmd) > 0 && dropped.Add(1) <= n {
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return err
	}}
}

func TestLostClaimReplyCostsNoAttempt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var dropped atomic.Int64
		client := faultyClient(t, b, loseClaimReplies(3, &dropped))
		topic := newTopic()
		pub := newPublisher(t, b)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, MaxAttempts: 1, LeaseTimeout: time.Second}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := subscribe(t, sub, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("m1", nil), message.NewMessage("m2", nil)))
		for _, want := range []string{"m1", "m2"} {
			msg := receive(t, ch, 5*time.Second)
			assert.Equal(t, want, msg.UUID)
			assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey), "a lost claim reply must not use up an attempt")
			msg.Ack()
		}
		assert.GreaterOrEqual(t, dropped.Load(), int64(1), "the hook must have dropped a claim reply")
		// No lease of a lost claim is left to expire into a dead letter, and none was dead-lettered.
		in := newInspector(t, b, 1)
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Zero(t, statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters)
	})
}

func TestMessageThatKillsItsConsumerEveryTimeStillBecomesADeadLetter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		const lease = 200 * time.Millisecond
		cfg := func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 2; c.LeaseTimeout = lease }
		require.NoError(t, newSubscriber(t, b, cfg).SubscribeInitialize(topic))
		require.NoError(t, pub.Publish(topic, message.NewMessage("poison", nil)))
		for attempt := 1; attempt <= 2; attempt++ {
			// A consumer that "dies" holding the message: its client goes away without Close.
			client := newClientLike(b)
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, MaxAttempts: 2, LeaseTimeout: lease}, errorLogger{})
			require.NoError(t, err)
			msg := receive(t, subscribe(t, sub, topic), 5*time.Second)
			assert.Equal(t, "poison", msg.UUID)
			assert.Equal(t, strconv.Itoa(attempt), msg.Metadata.Get(redisdelay.AttemptMetadataKey))
			// The consumer dies holding the message: its connections go, nothing is released.
			require.NoError(t, client.Close())
			t.Cleanup(func() { _ = sub.Close() })
		}
		// A healthy consumer claims it once the last lease expired: it never reaches its handler,
		// and the group holds nothing more.
		subscribe(t, newSubscriber(t, b, cfg), topic)
		dead := receive(t, subscribe(t, newSubscriber(t, b, nil), redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)), 5*time.Second)
		assert.Equal(t, "poison", dead.UUID)
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
		assert.Equal(t, redisdelay.DeadLetterReasonLeaseExpired, dead.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
	})
}

func TestMessagesPublishedBeforeAnyGroupWaitForTheFirstGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		require.NoError(t, pub.Publish(topic, message.NewMessage("early-1", nil)))
		require.NoError(t, pub.Publish(topic, message.NewMessage("early-2", nil)))

		// No new-group window (see newgroupwindow_test.go for a group registering within it).
		first := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup, c.NewGroupWindow = "billing", -1 })
		ch := subscribe(t, first, topic)
		for _, want := range []string{"early-1", "early-2"} {
			msg := receive(t, ch, 5*time.Second)
			assert.Equal(t, want, msg.UUID, "the first group gets what was published before it")
			msg.Ack()
		}
		// A group registered later gets only what is published after it.
		second := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = "shipping" })
		ch2 := subscribe(t, second, topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("late", nil)))
		assert.Equal(t, "late", receive(t, ch2, 5*time.Second).UUID)
		assert.Equal(t, "late", receive(t, ch, 5*time.Second).UUID)

		groups, err := b.client.SMembers(context.Background(), redisdelay.DefaultKeyPrefix+"{"+topic+"}:groups").Result()
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"billing", "shipping"}, groups, "no group is registered that nobody asked for")
	})
}

func TestRepublishedMessageWhoseDelayWasServedIsDueAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic, next := newTopic(), newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, nil)
		ch, chNext := subscribe(t, sub, topic), subscribe(t, sub, next)
		msg := message.NewMessage("hop", nil)
		delay.Message(msg, delay.For(300*time.Millisecond))
		require.NoError(t, pub.Publish(topic, msg))
		got := receive(t, ch, 5*time.Second)
		require.NotEmpty(t, got.Metadata.Get(redisdelay.DueTimeMetadataKey))
		got.Ack()

		// A forwarder or requeuer re-publishes it as it is: due at once, at every hop.
		start := time.Now()
		require.NoError(t, pub.Publish(next, got))
		again := receive(t, chNext, 5*time.Second)
		assert.Less(t, time.Since(start), 100*time.Millisecond, "a served delay is not served again")
		again.Ack()

		// A handler that sets a fresh delay on a delivered message gets the full delay.
		fresh := again.Copy()
		delay.Message(fresh, delay.For(200*time.Millisecond))
		start = time.Now()
		require.NoError(t, pub.Publish(next, fresh))
		later := receive(t, chNext, 5*time.Second)
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "a fresh delay is never cut short")
		later.Ack()
	})
}

func TestAckedLastMessageDoesNotComeBackWhenTheClientIsClosedFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		for round := range 5 {
			client := newClientLike(b)
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, LeaseTimeout: 300 * time.Millisecond}, errorLogger{})
			require.NoError(t, err)
			ch := subscribe(t, sub, topic)
			require.NoError(t, pub.Publish(topic, message.NewMessage("last", nil)))
			msg := receive(t, ch, 5*time.Second)
			msg.Ack()
			// As an application that closes the client it shares before the subscriber.
			require.NoError(t, client.Close())
			require.NoError(t, sub.Close())

			// The ack reached Redis: no lease is left to expire and bring the message back, and
			// it was not released either.
			s := waitStats(t, in, topic, redisdelay.DefaultConsumerGroup, "without a lease", func(s redisdelay.GroupStats) bool { return s.InFlight == 0 })
			assert.Zero(t, s.Scheduled+s.Due, "round %d: the acked message is due again", round)
		}
	})
}

func TestAnyDeadLetterTopicWorksForManyTopics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		shared := "dead-" + newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.MaxAttempts = 1
			c.DeadLetterTopic = func(string, string) string { return shared }
		})
		topics := []string{newTopic(), newTopic(), newTopic()}
		for _, topic := range topics {
			ch := subscribe(t, sub, topic)
			require.NoError(t, pub.Publish(topic, message.NewMessage("poison-"+topic, []byte(topic))))
			receive(t, ch, 5*time.Second).Nack()
		}
		dead := subscribe(t, newSubscriber(t, b, nil), shared)
		got := map[string]string{}
		for range topics {
			letter := receive(t, dead, 5*time.Second)
			got[letter.UUID] = letter.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey)
			assert.Equal(t, letter.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey), string(letter.Payload))
			letter.Ack()
		}
		waitDrained(t, in, shared, redisdelay.DefaultConsumerGroup) // one dead letter per topic, no more
		for _, topic := range topics {
			assert.Equal(t, topic, got["poison-"+topic])
		}
	})
}

func TestNamesThatPublishAcceptsCanBeSubscribedByEveryGroup(t *testing.T) {
	b := embeddedRedis(t)
	topic := strings.Repeat("t", redisdelay.MaxNameLength)
	group := strings.Repeat("g", redisdelay.MaxNameLength)
	pub := newPublisher(t, b)
	require.NoError(t, pub.Publish(topic, message.NewMessage("long", nil)))
	sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = group })
	ch := subscribe(t, sub, topic)
	assert.Equal(t, "long", receive(t, ch, 5*time.Second).UUID)
	_, err := sub.Subscribe(context.Background(), redisdelay.DefaultDeadLetterTopic(topic, group))
	assert.NoError(t, err, "a dead-letter topic can be subscribed too")
	assert.ErrorIs(t, pub.Publish(topic+"x", message.NewMessage("too-long", nil)), redisdelay.ErrInvalidName)
}

func TestHugeValuesAreQuotedShortInErrors(t *testing.T) {
	b := embeddedRedis(t)
	pub := newPublisher(t, b)
	huge := strings.Repeat("u", 2<<20)
	msg := message.NewMessage(huge, nil)
	msg.Metadata.Set(delay.DelayedForKey, huge)
	err := pub.Publish("orders", msg)
	var me *redisdelay.MessageError
	require.ErrorAs(t, err, &me)
	assert.Less(t, len(err.Error()), 400, "error: %.300s", err.Error())
	assert.Contains(t, err.Error(), "2097152 bytes")
	err = pub.Publish(huge, message.NewMessage("m", nil))
	require.ErrorIs(t, err, redisdelay.ErrInvalidName)
	assert.Less(t, len(err.Error()), 400)
}

func TestNilMessageIsRejectedAndNothingIsStored(t *testing.T) {
	b := embeddedRedis(t)
	topic := newTopic()
	pub := newPublisher(t, b)
	require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
	var err error
	require.NotPanics(t, func() { err = pub.Publish(topic, message.NewMessage("ok", nil), nil) })
	var me *redisdelay.MessageError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, topic, me.Topic)
	assert.Contains(t, err.Error(), "message 2 of 2 is nil")
	assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "nothing of the call is stored")
}

func TestEvictingRedisIsRefusedUnlessAllowed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	b := backend{name: "redis", client: srv.Client(t)}
	pub := newPublisher(t, b)
	err := pub.Publish("orders", message.NewMessage("m", nil))
	require.ErrorIs(t, err, redisdelay.ErrEvictingRedis)
	assert.Contains(t, err.Error(), "allkeys-lru")
	assert.Contains(t, err.Error(), "noeviction")
	sub := newSubscriber(t, b, nil)
	_, err = sub.Subscribe(context.Background(), "orders")
	require.ErrorIs(t, err, redisdelay.ErrEvictingRedis)
	require.ErrorIs(t, sub.SubscribeInitialize("orders"), redisdelay.ErrEvictingRedis)
	n, err := b.client.DBSize(context.Background()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")

	allowed, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, AllowEvictingRedis: true}, errorLogger{})
	require.NoError(t, err)
	allowedSub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.AllowEvictingRedis = true })
	ch := subscribe(t, allowedSub, "orders")
	require.NoError(t, allowed.Publish("orders", message.NewMessage("m", nil)))
	assert.Equal(t, "m", receive(t, ch, 5*time.Second).UUID)
}

func TestFullRedisRefusesPublishesAndCanBeDrained(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Extra: []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}})
	b := backend{name: "redis", client: srv.Client(t)}
	topic := newTopic()
	// No new-group window, which would keep the drained messages in memory while it lasts.
	cfg := func(c *redisdelay.SubscriberConfig) {
		c.ConsumerGroup = "billing"
		c.MaxAttempts = 1
		c.NewGroupWindow = -1
	}
	require.NoError(t, newSubscriber(t, b, cfg).SubscribeInitialize(topic))
	require.NoError(t, newSubscriber(t, b, cfg).SubscribeInitialize(redisdelay.DefaultDeadLetterTopic(topic, "billing")))
	pub := newPublisher(t, b)
	payload := make([]byte, 2000)
	stored := 0
	var err error
	for i := 0; i < 10000; i++ {
		if err = pub.Publish(topic, message.NewMessage("m", payload)); err != nil {
			break
		}
		stored++
	}
	require.ErrorIs(t, err, redisdelay.ErrRedisFull)
	assert.Contains(t, err.Error(), "OOM")
	require.Greater(t, stored, 100)

	// A fresh subscriber of the registered group starts and drains it; the first message is
	// nacked on its last attempt, so it becomes a dead letter while Redis is full.
	sub := newSubscriber(t, b, cfg)
	ch := subscribe(t, sub, topic)
	receive(t, ch, 5*time.Second).Nack()
	for i := 1; i < stored; i++ {
		receive(t, ch, 5*time.Second).Ack()
	}
	dead := receive(t, subscribe(t, newSubscriber(t, b, cfg), redisdelay.DefaultDeadLetterTopic(topic, "billing")), 5*time.Second)
	assert.Equal(t, "m", dead.UUID)
	dead.Ack()
	require.NoError(t, pub.Publish(topic, message.NewMessage("after", nil)), "drained, Redis takes publishes again")
}

// blackhole accepts TCP connections and never answers, like a Redis that hangs.
func blackhole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return l.Addr().String()
}

// timerSlack is how late a bounded call may return in these tests: the bound is OperationTimeout,
// and the slack covers timers and goroutines that run late on a loaded 2-core machine under
// -race (64 callers at once); 100 ms was exceeded by 19 ms once in CI.
const timerSlack = 200 * time.Millisecond

// TestPublishReturnsWithinOperationTimeoutWhenRedisDoesNotAnswer: whether Redis is frozen
// (SIGSTOP, after a publish opened the connections), never answers (a listener that accepts and
// stays silent) or refuses connections, 64 concurrent Publish calls each fail within
// OperationTimeout (+ timerSlack), with an error naming the topic and the message, whatever the
// client's ContextTimeoutEnabled.
func TestPublishReturnsWithinOperationTimeoutWhenRedisDoesNotAnswer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, fault := range []struct {
		name string
		// start returns the address to publish to, and, for a Redis that answers at first, the
		// function that freezes it.
		start func(t *testing.T) (addr string, freeze func())
	}{
		{"frozen", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t, redistest.Options{})
			return srv.Addr, func() {
				require.NoError(t, srv.Signal(syscall.SIGSTOP))
				t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
			}
		}},
		{"hanging", func(t *testing.T) (string, func()) { return blackhole(t), nil }},
		{"refused", func(t *testing.T) (string, func()) {
			port, err := redistest.FreePort()
			require.NoError(t, err)
			return fmt.Sprintf("127.0.0.1:%d", port), nil
		}},
	} {
		for _, ctxTimeouts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", fault.name, ctxTimeouts), func(t *testing.T) {
				addr, freeze := fault.start(t)
				client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeouts})
				t.Cleanup(func() { _ = client.Close() })
				pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, OperationTimeout: timeout}, errorLogger{})
				require.NoError(t, err)
				if freeze != nil {
					require.NoError(t, pub.Publish("orders", message.NewMessage("warm-up", nil)))
					freeze()
				}
				var wg sync.WaitGroup
				took := make([]time.Duration, 64)
				errs := make([]error, len(took))
				for i := range took {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start := time.Now()
						errs[i] = pub.Publish("orders", message.NewMessage("m-"+strconv.Itoa(i), nil))
						took[i] = time.Since(start)
					}()
				}
				wg.Wait()
				for i := range took {
					if assert.Error(t, errs[i], "publisher %d", i) {
						assert.Contains(t, errs[i].Error(), `"orders"`)
						assert.Contains(t, errs[i].Error(), strconv.Quote("m-"+strconv.Itoa(i)))
					}
					assert.LessOrEqual(t, took[i], timeout+timerSlack, "publisher %d", i)
				}
			})
		}
	}
}

// TestCloseReturnsWithinOperationTimeoutWhenRedisDoesNotAnswer: a Subscriber that holds claimed
// messages on two topics (one handed out, one waiting behind it) closes within
// OperationTimeout (+ timerSlack) when Redis is frozen (SIGSTOP) or stopped, and its output channels
// are closed when Close returns.
func TestCloseReturnsWithinOperationTimeoutWhenRedisDoesNotAnswer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, fault := range []struct {
		name string
		stop func(t *testing.T, srv *redistest.Server)
	}{
		{"frozen", func(t *testing.T, srv *redistest.Server) {
			require.NoError(t, srv.Signal(syscall.SIGSTOP))
			t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
		}},
		{"stopped", func(t *testing.T, srv *redistest.Server) { srv.Stop() }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			b := backend{name: "redis", client: srv.Client(t)}
			pub := newPublisher(t, b)
			sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.OperationTimeout = timeout })
			var chs []<-chan *message.Message
			for _, topic := range []string{newTopic(), newTopic()} {
				ch := subscribe(t, sub, topic)
				require.NoError(t, pub.Publish(topic, message.NewMessage("a", nil), message.NewMessage("b", nil)))
				receive(t, ch, 5*time.Second).Ack() // "b" waits, claimed, to be handed out
				chs = append(chs, ch)
			}
			fault.stop(t, srv)
			start := time.Now()
			require.NoError(t, sub.Close())
			assert.LessOrEqual(t, time.Since(start), timeout+timerSlack)
			for _, ch := range chs {
				select {
				case _, open := <-ch:
					assert.False(t, open, "a message came out after Close returned")
				default:
					t.Error("an output channel is still open after Close returned")
				}
			}
		})
	}
}

// commandFault is a go-redis hook that fails every command of one name without sending it, as
// when the connection dies while the command runs.
type commandFault struct {
	name string
	err  error
}

func (f commandFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f commandFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f commandFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), f.name) {
			cmd.SetErr(f.err)
			return f.err
		}
		return next(ctx, cmd)
	}
}

// TestDurablePublishWhoseWaitFailsReportsNotDurable checks that a durable publish whose WAIT
// fails after the publish script ran (the connection dies) returns ErrNotDurable, since the
// messages are stored: never an unclassified error.
func TestDurablePublishWhoseWaitFailsReportsNotDurable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		hook := commandFault{name: "wait", err: io.ErrUnexpectedEOF}
		client := newClientLike(b)
		t.Cleanup(func() { _ = client.Close() })
		if cc, ok := client.(*redis.ClusterClient); ok {
			// A durable publish runs on a connection of the master's own client.
			cc.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
		} else {
			client.AddHook(hook)
		}
		topic := newTopic()
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, DurableReplicas: 1, DurableTimeout: 100 * time.Millisecond}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })

		err = pub.Publish(topic, message.NewMessage("stored-not-replicated", nil))
		require.ErrorIs(t, err, redisdelay.ErrNotDurable, "the script ran: stored, not confirmed")
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "the cause is kept")
		assert.Contains(t, err.Error(), topic)

		ch := subscribe(t, sub, topic)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, "stored-not-replicated", msg.UUID, "it was stored")
		msg.Ack()
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup) // once
	})
}
