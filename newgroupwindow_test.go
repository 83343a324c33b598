package redisdelay_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// The commands and events of Watermill's CQRS example (_examples/basic/5-cqrs-protobuf).
type bookRoom struct{ RoomID, GuestName string }

type roomBooked struct{ ReservationID, RoomID, GuestName string }

// TestCQRSStartUpWithACommandSentBeforeRunMissesNoEvent ports Watermill's CQRS example: a
// command sent before router.Run is handled once the command handler subscribes, and the event
// it publishes reaches both event handlers, although the router subscribes them one after the
// other, so that the event may be published before the second handler's group registered.
func TestCQRSStartUpWithACommandSentBeforeRunMissesNoEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const runs = 50
		misses := 0
		for run := range runs {
			misses += cqrsStartUp(t, b, run)
		}
		t.Logf("%d events missed in %d runs of 2 event handlers", misses, runs)
		assert.Zero(t, misses)
	})
}

// cqrsStartUp runs the example once on topics of its own and returns how many of the two event
// handlers missed the event.
func cqrsStartUp(t *testing.T, b backend, run int) int {
	prefix := "run-" + watermill.NewShortUUID() + "."
	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}
	pub := newPublisher(t, b)
	var subs []*redisdelay.Subscriber
	var subsMu sync.Mutex
	subscriber := func(handler string) (message.Subscriber, error) {
		sub := newSubscriber(t, b, inGroup(handler))
		subsMu.Lock()
		defer subsMu.Unlock()
		subs = append(subs, sub)
		return sub, nil
	}

	router, err := message.NewRouter(message.RouterConfig{}, errorLogger{})
	require.NoError(t, err)
	commandBus, err := cqrs.NewCommandBusWithConfig(pub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return prefix + "commands." + p.CommandName, nil
		},
		Marshaler: marshaler,
	})
	require.NoError(t, err)
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return prefix + "commands." + p.CommandName, nil
		},
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return subscriber(p.HandlerName)
		},
		Marshaler: marshaler,
	})
	require.NoError(t, err)
	eventBus, err := cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) {
			return prefix + "events." + p.EventName, nil
		},
		Marshaler: marshaler,
	})
	require.NoError(t, err)
	eventProcessor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return prefix + "events." + p.EventName, nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return subscriber(p.HandlerName)
		},
		Marshaler: marshaler,
	})
	require.NoError(t, err)

	require.NoError(t, commandProcessor.AddHandlers(cqrs.NewCommandHandler("BookRoomHandler", func(ctx context.Context, cmd *bookRoom) error {
		return eventBus.Publish(ctx, &roomBooked{ReservationID: watermill.NewUUID(), RoomID: cmd.RoomID, GuestName: cmd.GuestName})
	})))
	received := make(chan string, 4)
	for _, handler := range []string{"BookingsFinancialReport", "OrderBeerOnRoomBooked"} {
		require.NoError(t, eventProcessor.AddHandlers(cqrs.NewEventHandler(handler, func(ctx context.Context, e *roomBooked) error {
			if e.RoomID == "113" {
				received <- handler
			}
			return nil
		})))
	}

	// The command goes out before the router runs: no group is registered on its topic yet.
	require.NoError(t, commandBus.Send(context.Background(), &bookRoom{RoomID: "113", GuestName: "run " + string(rune('A'+run%26))}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	routerDone := make(chan struct{})
	go func() {
		defer close(routerDone)
		_ = router.Run(ctx)
	}()

	got := map[string]bool{}
	deadline := time.After(3 * time.Second)
wait:
	for len(got) < 2 {
		select {
		case h := <-received:
			got[h] = true
		case <-deadline:
			break wait
		}
	}
	require.NoError(t, router.Close())
	<-routerDone
	subsMu.Lock()
	for _, sub := range subs {
		require.NoError(t, sub.Close())
	}
	subsMu.Unlock()
	return 2 - len(got)
}

// received is one message as a group received it.
type received struct {
	at  time.Time
	due string // DueTimeMetadataKey
}

// collect receives n messages from ch, acks them and returns them by UUID.
func collect(t *testing.T, ch <-chan *message.Message, n int) map[string]received {
	t.Helper()
	got := map[string]received{}
	for range n {
		msg := receive(t, ch, 5*time.Second)
		got[msg.UUID] = received{at: time.Now(), due: msg.Metadata.Get(redisdelay.DueTimeMetadataKey)}
		msg.Ack()
	}
	return got
}

// windowEnded waits until the window key of topic is gone; on miniredis, whose keys expire only
// when told, it moves the clock past the window once the window has passed locally.
func windowEnded(t *testing.T, b backend, prefix, topic string, window time.Duration) {
	t.Helper()
	_, key := redisdelay.WindowKeysForTest(prefix, topic)
	ctx := context.Background()
	if b.miniredis != nil {
		time.Sleep(window) // the window passes on the client's clock: time passing is the condition
		b.miniredis.FastForward(window)
	}
	require.Eventually(t, func() bool { return b.client.Exists(ctx, key).Val() == 0 }, 5*time.Second+window, 10*time.Millisecond, "the window key expires")
}

func TestAGroupRegisteredWithinTheWindowReceivesWhatWasPublishedBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		chA := subscribe(t, newSubscriber(t, b, inGroup("a")), topic)

		published := time.Now()
		require.NoError(t, pub.Publish(topic, message.NewMessage("plain", nil)))
		delayed := message.NewMessage("delayed", nil)
		delay.Message(delayed, delay.For(1500*time.Millisecond))
		require.NoError(t, pub.Publish(topic, delayed))
		k := keyed("order-1", time.Second, "keyed")
		require.NoError(t, pub.Publish(topic, k))
		require.NoError(t, pub.Publish(topic, keyed("order-2", time.Second, "cancelled")))
		cancelled, err := in.Cancel(ctx, topic, redisdelay.ByKey("order-2"))
		require.NoError(t, err)
		assert.Equal(t, map[string]redisdelay.Outcome{"a": redisdelay.OutcomeApplied}, cancelled.Groups, "the window's copy is no group")

		chB := subscribe(t, newSubscriber(t, b, inGroup("b")), topic)
		st, err := in.Status(ctx, topic, redisdelay.ByKey("order-1"))
		require.NoError(t, err)
		assert.NotContains(t, st.Groups, redisdelay.ParkedGroup, "the window's copy is no group")
		if assert.Contains(t, st.Groups, "b") && st.Groups["b"].State == redisdelay.StateScheduled {
			assert.Equal(t, st.Groups["a"].DueAt, st.Groups["b"].DueAt, "the original due time")
		}

		var a, bb map[string]received
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); a = collect(t, chA, 3) }()
		go func() { defer wg.Done(); bb = collect(t, chB, 3) }()
		wg.Wait()
		require.Len(t, bb, 3, "group b receives what was published before it registered")
		for uuid, earliest := range map[string]time.Duration{"plain": 0, k.UUID: time.Second, "delayed": 1500 * time.Millisecond} {
			require.Contains(t, bb, uuid)
			assert.Equal(t, a[uuid].due, bb[uuid].due, "%s keeps its due time in group b", uuid)
			assert.GreaterOrEqual(t, bb[uuid].at.Sub(published), earliest, "%s is never early in group b", uuid)
		}
		waitDrained(t, in, topic, "b") // not the message cancelled before b registered

		// Past a short window, a group receives only what is published after it registered.
		short := newTopic()
		window := func(c *redisdelay.SubscriberConfig) { c.NewGroupWindow = 300 * time.Millisecond }
		subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { window(c); c.ConsumerGroup = "a" }), short)
		require.NoError(t, pub.Publish(short, message.NewMessage("before", nil)))
		windowEnded(t, b, "", short, 300*time.Millisecond)
		chLate := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { window(c); c.ConsumerGroup = "late" }), short)
		require.NoError(t, pub.Publish(short, message.NewMessage("after", nil)))
		msg := receive(t, chLate, 5*time.Second)
		assert.Equal(t, "after", msg.UUID)
		msg.Ack()
		waitDrained(t, in, short, "late") // not the message published before it registered
	})
}

// keysUnder returns every key under prefix, on every master of a cluster.
func keysUnder(t *testing.T, b backend, prefix string) []string {
	keys, err := scanKeys(context.Background(), b, prefix+"*")
	require.NoError(t, err)
	return keys
}

func TestTheWindowLeavesNoKeysBehind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		prefix := "w" + watermill.NewShortUUID() + ":"
		topic := newTopic()
		const window = 500 * time.Millisecond
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyPrefix = prefix })
		group := func(name string) func(*redisdelay.SubscriberConfig) {
			return func(c *redisdelay.SubscriberConfig) {
				c.KeyPrefix, c.ConsumerGroup, c.NewGroupWindow = prefix, name, window
			}
		}
		require.NoError(t, pub.Publish(topic, message.NewMessage("parked", nil)))
		chA := subscribe(t, newSubscriber(t, b, group("a")), topic)
		require.NoError(t, pub.Publish(topic, message.NewMessage("plain", nil), keyed("order-1", 0, "keyed"), keyed("order-2", 200*time.Millisecond, "later")))
		chB := subscribe(t, newSubscriber(t, b, group("b")), topic)
		parked, windowKey := redisdelay.WindowKeysForTest(prefix, topic)
		assert.EqualValues(t, 4, b.client.ZCard(ctx, parked).Val(), "the window keeps the messages")
		collect(t, chA, 4)
		collect(t, chB, 4)

		windowEnded(t, b, prefix, topic, window)
		// What stays: the topic registry, the groups set, the ID counter and its birth, and each
		// group's lease set (its marker) and epoch; the call and claim records expire by themselves,
		// and the worker records of the running subscribers are deleted by their Close.
		tag := prefix + "{" + topic + "}"
		persistent := []string{prefix + "topics", tag + ":g:a:epoch", tag + ":g:a:lease", tag + ":g:b:epoch", tag + ":g:b:lease", tag + ":groups", tag + ":seq", tag + ":seq:birth"}
		slices.Sort(persistent)
		var left []string
		require.Eventually(t, func() bool {
			left = left[:0]
			for _, k := range keysUnder(t, b, prefix) {
				if !strings.Contains(k, ":call:") && !strings.Contains(k, ":claim:") && !strings.HasPrefix(k, prefix+"{workers}") {
					left = append(left, k)
				}
			}
			return slices.Equal(left, persistent)
		}, 5*time.Second, 20*time.Millisecond, "keys left: %v", &left)
		assert.Zero(t, b.client.Exists(ctx, parked, windowKey).Val())
	})
}

func TestParkedMessagesBeforeAnyGroupStillGoToTheFirstGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		for _, c := range []struct {
			name   string
			window time.Duration
		}{{"default window", 0}, {"no window", -1}} {
			topic := newTopic()
			cfg := func(group string) func(*redisdelay.SubscriberConfig) {
				return func(sc *redisdelay.SubscriberConfig) { sc.ConsumerGroup, sc.NewGroupWindow = group, c.window }
			}
			require.NoError(t, pub.Publish(topic, message.NewMessage("early-1", nil), keyed("early-key", 0, "early-2")))
			first := subscribe(t, newSubscriber(t, b, cfg("first")), topic)
			got := collect(t, first, 2)
			assert.Contains(t, got, "early-1", c.name)
			parked, windowKey := redisdelay.WindowKeysForTest("", topic)
			if c.window < 0 {
				// Today's behaviour: the first group took the parked set over, and a group
				// registered after it receives only what is published after it.
				assert.Zero(t, b.client.Exists(ctx, parked, windowKey).Val(), c.name)
				second := subscribe(t, newSubscriber(t, b, cfg("second")), topic)
				require.NoError(t, pub.Publish(topic, message.NewMessage("after", nil)))
				msg := receive(t, second, 5*time.Second)
				assert.Equal(t, "after", msg.UUID, c.name)
				msg.Ack()
				waitDrained(t, in, topic, "second") // nothing parked before it registered
			}
		}
	})
}
