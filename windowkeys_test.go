package redisdelay_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// windowKeyCase is one cell of the key × new-group window matrix: a message with a key is
// published, then another with the same key and policy.
type windowKeyCase struct {
	// policy is k (KeepExisting), r (ReplaceExisting), < (KeepEarlier), > (KeepLater) or w
	// (KeepLater with a debounce max wait).
	policy    byte
	window    string        // the new-group window: "open", "ended" (before the publishes) or "off"
	retention time.Duration // PublisherConfig.KeyRetention
	// acked: every registered group acked the first message before the second is published;
	// else it is still due in every group.
	acked bool
}

// windowStates are the states of the new-group window in the matrix, and windowLengths their
// SubscriberConfig.NewGroupWindow: the default (1 min), a short one that ends before the
// publishes, none.
var (
	windowStates  = []string{"open", "ended", "off"}
	windowLengths = map[string]time.Duration{"open": 0, "ended": 300 * time.Millisecond, "off": -1}
)

const (
	// matrixRetention is long enough for both groups to receive, ack and drain the first
	// message within it, with -race on 2 busy cores (700 ms was not, with 4 tests at a time),
	// so that the second publish finds the key still taken.
	matrixRetention = 1500 * time.Millisecond
	matrixMaxWait   = 1300 * time.Millisecond
)

func (c windowKeyCase) String() string {
	return fmt.Sprintf("policy %c window %s retention %s acked %t", c.policy, c.window, c.retention, c.acked)
}

// message returns a message with the case's key and policy, due after d.
func (c windowKeyCase) message(payload string, d time.Duration) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	if c.policy == 'w' {
		redisdelay.WithDebounce(msg, "doc-1", matrixMaxWait)
	} else {
		redisdelay.WithKey(msg, "doc-1")
		policy := map[byte]redisdelay.DuplicatePolicy{'k': redisdelay.KeepExisting, 'r': redisdelay.ReplaceExisting, '<': redisdelay.KeepEarlier, '>': redisdelay.KeepLater}[c.policy]
		msg.Metadata.Set(redisdelay.OnDuplicateMetadataKey, string(policy))
	}
	if d > 0 {
		delay.Message(msg, delay.For(d))
	}
	return msg
}

// delays returns the delays of the first and the second message: while the first is due, the
// second moves it where its policy lets it (earlier for replace and keep-earlier, later for
// keep-later, back to the cap of 1.3 s with a max wait).
func (c windowKeyCase) delays() (first, second time.Duration) {
	if c.acked {
		return 0, 0
	}
	if c.policy == '>' || c.policy == 'w' {
		return time.Second, 1600 * time.Millisecond
	}
	return time.Second, 400 * time.Millisecond
}

// want returns the documented outcome of the second publish and what every group receives after
// it: the key is taken while a registered group holds the message, and for the retention after
// they all are done; the window plays no part.
func (c windowKeyCase) want() (redisdelay.Outcome, string) {
	switch {
	case c.acked && c.retention > 0:
		return redisdelay.OutcomeDuplicate, "third" // published once the retention passed
	case c.acked:
		return redisdelay.OutcomeScheduled, "second"
	case c.policy == 'k':
		return redisdelay.OutcomeDuplicate, "first"
	default:
		return redisdelay.OutcomeReplaced, "second"
	}
}

// windowKeyCases is the whole matrix: 5 policies × window open/ended/off × retention 0/1.5 s ×
// due/acked.
func windowKeyCases() []windowKeyCase {
	var cases []windowKeyCase
	for _, policy := range []byte("kr<>w") {
		for _, window := range windowStates {
			for _, retention := range []time.Duration{0, matrixRetention} {
				for _, acked := range []bool{false, true} {
					cases = append(cases, windowKeyCase{policy: policy, window: window, retention: retention, acked: acked})
				}
			}
		}
	}
	return cases
}

// TestKeyIsFreeOnceEveryRegisteredGroupIsDoneWindowOrNot publishes a key twice for every cell
// of windowKeyCases, with two consumer groups registered (the second within the window when
// it is open): the second publish is a duplicate only where the key rules say the key is
// taken, whether the new-group window is open or not, and each group then receives the last
// state (and nothing else: it drains).
func TestKeyIsFreeOnceEveryRegisteredGroupIsDoneWindowOrNot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		pubs := map[time.Duration]*redisdelay.Publisher{}
		for _, r := range []time.Duration{0, matrixRetention} {
			pubs[r] = publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyRetention = r })
		}
		subs := map[string][2]*redisdelay.Subscriber{}
		for _, state := range windowStates {
			window := windowLengths[state]
			group := func(name string) func(*redisdelay.SubscriberConfig) {
				return func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup, c.NewGroupWindow = name, window }
			}
			subs[state] = [2]*redisdelay.Subscriber{newSubscriber(t, b, group("a")), newSubscriber(t, b, group("b"))}
		}
		in := newInspector(t, b, 1)
		for _, c := range windowKeyCases() {
			t.Run(c.String(), func(t *testing.T) {
				t.Parallel()
				runWindowKeyCase(t, b, c, pubs[c.retention], subs[c.window], in)
			})
		}
	})
}

func runWindowKeyCase(t *testing.T, b backend, c windowKeyCase, pub *redisdelay.Publisher, subs [2]*redisdelay.Subscriber, in *redisdelay.Inspector) {
	topic := newTopic()
	chs := [2]<-chan *message.Message{subscribe(t, subs[0], topic), subscribe(t, subs[1], topic)}
	if c.window == "ended" {
		windowEnded(t, b, "", topic, windowLengths["ended"])
	}
	first, second := c.delays()
	require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, c.message("first", first)))
	if c.acked {
		for i, ch := range chs {
			receivePayload(t, ch, "first", "group "+[]string{"a", "b"}[i])
			waitDrained(t, in, topic, []string{"a", "b"}[i])
		}
	}
	want, last := c.want()
	assert.Equal(t, want, publishOne(t, pub, topic, c.message("second", second)), "the second publish")
	if last == "third" {
		waitRetentionPassed(t, b, in, topic, "doc-1")
		assert.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, c.message("third", 0)), "a publish once the retention passed")
	}
	for i, ch := range chs {
		receivePayload(t, ch, last, "group "+[]string{"a", "b"}[i])
		waitDrained(t, in, topic, []string{"a", "b"}[i])
	}
}

// receivePayload waits for one message on ch, checks its payload and acks it.
func receivePayload(t *testing.T, ch <-chan *message.Message, want, what string) {
	t.Helper()
	msg := receive(t, ch, 5*time.Second)
	assert.Equal(t, want, string(msg.Payload), what)
	msg.Ack()
}

// waitRetentionPassed waits until the history of key on topic has expired: Status shows no
// group's record any more. On miniredis, whose keys expire only when told, it moves the clock
// past the retention first.
func waitRetentionPassed(t *testing.T, b backend, in *redisdelay.Inspector, topic, key string) {
	t.Helper()
	if b.miniredis != nil {
		time.Sleep(matrixRetention) // the retention passes on the client's clock: time passing is the condition
		b.miniredis.FastForward(matrixRetention)
	}
	var st redisdelay.KeyStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = in.Status(context.Background(), topic, redisdelay.ByKey(key))
		require.NoError(t, err)
		for _, g := range st.Groups {
			if g.State == redisdelay.StateAcked {
				return false
			}
		}
		return !st.Live
	}, 5*time.Second, 10*time.Millisecond, "the key's history expires: %+v", &st)
}

// TestAGroupRegisteredWithinTheWindowAfterTheAcksGetsTheEarlierMessages: a keyed message that
// every registered group acked frees its key at once (one parked before the first group
// included), while the window still keeps a copy for a group that registers within it: that
// group receives the earlier messages, as copies without their key that hold none (publishing
// the key again while it holds them is Scheduled), and once the window has ended, the topic's
// keys are back to the baseline.
func TestAGroupRegisteredWithinTheWindowAfterTheAcksGetsTheEarlierMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "k" + watermill.NewShortUUID() + ":"
		topic := newTopic()
		const window = 1500 * time.Millisecond
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyPrefix = prefix })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, errorLogger{})
		require.NoError(t, err)
		group := func(name string) <-chan *message.Message {
			return subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
				c.KeyPrefix, c.ConsumerGroup, c.NewGroupWindow = prefix, name, window
			}), topic)
		}
		early := keyed("early-1", 0, "e1")
		require.NoError(t, pub.Publish(topic, early)) // parked for the first group
		chA := group("a")
		first, plain := keyed("order-42", 0, "v1"), message.NewMessage("plain", []byte("p"))
		require.NoError(t, pub.Publish(topic, first, plain))
		collect(t, chA, 3)
		waitDrained(t, in, topic, "a")
		second, early2 := keyed("order-42", 0, "v2"), keyed("early-1", 0, "e2")
		for _, msg := range []*message.Message{second, early2} {
			require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, msg), "the key is free once a, the only group, acked it")
		}
		collect(t, chA, 2)
		waitDrained(t, in, topic, "a")

		chB := group("b")
		// b holds the copies (one in flight, the others due), and the key is free.
		inFlight := receive(t, chB, 5*time.Second)
		third := keyed("order-42", 0, "v3")
		require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, third), "b's copies of done messages hold no key")
		receivePayload(t, chA, "v3", "group a")
		inFlight.Ack()
		got := collect(t, chB, 5)
		got[inFlight.UUID] = received{}
		assert.ElementsMatch(t, []string{early.UUID, first.UUID, plain.UUID, second.UUID, early2.UUID, third.UUID}, slices.Collect(maps.Keys(got)),
			"b receives what was published before it registered, and v3")
		waitDrained(t, in, topic, "a")
		waitDrained(t, in, topic, "b")
		for _, key := range []string{"order-42", "early-1"} {
			st, err := in.Status(context.Background(), topic, redisdelay.ByKey(key))
			require.NoError(t, err)
			assert.False(t, st.Live, "the key is free: %+v", st)
		}
		windowEnded(t, b, prefix, topic, window)
		keysBackToBaseline(t, b, prefix, topic, "a", "b")
	})
}

// keysBackToBaseline waits until the keys under prefix are those that outlive every message of
// topic: the topic registry, the groups set, the ID counter and each group's lease set (its
// marker) and epoch; the call and claim records, which expire by themselves, and the worker
// records of the Subscribers still open, left out.
func keysBackToBaseline(t *testing.T, b backend, prefix, topic string, groups ...string) {
	t.Helper()
	tag := prefix + "{" + topic + "}"
	baseline := []string{prefix + "topics", tag + ":groups", tag + ":seq", tag + ":seq:birth"}
	for _, g := range groups {
		baseline = append(baseline, tag+":g:"+g+":epoch", tag+":g:"+g+":lease")
	}
	slices.Sort(baseline)
	// A loop of its own rather than require.Eventually, whose condition runs in a goroutine that
	// may still write left while the failure message reads it.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = left[:0]
		for _, k := range keysUnder(t, b, prefix) {
			// The worker records of the test's still-open Subscribers go with them (Close).
			if !strings.Contains(k, ":call:") && !strings.Contains(k, ":claim:") && !strings.HasPrefix(k, prefix+"{workers}") {
				left = append(left, k)
			}
		}
		if slices.Equal(left, baseline) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left once the window ended: %v, want %v", left, baseline)
		}
	}
}

// TestDebouncedDocumentRepublishedAcrossAcksInTheWindowDeliversEachRoundsLastState republishes
// a document with keep-later and a max wait every 200 ms for 3 s while the new-group window is
// open (on a topic of 2 partitions), acking each delivery at once: every ack frees the key, so
// the next publish starts a new round (Scheduled), and each round delivers the last state it
// stored: the payload of its last Scheduled or Replaced publish, the last one included.
func TestDebouncedDocumentRepublishedAcrossAcksInTheWindowDeliversEachRoundsLastState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const every, after, maxWait, run = 200 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, 3 * time.Second
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions = 2 })
		in := newInspector(t, b, 2)
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = 2 }), topic)
		delivered := make(chan string, 100)
		go func() {
			for msg := range ch {
				delivered <- string(msg.Payload)
				msg.Ack()
			}
		}()

		var want []string // per round, the payload of its last Scheduled or Replaced publish
		var letters strings.Builder
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i, start := 0, time.Now(); time.Since(start) < run; i++ {
			payload := strconv.Itoa(i)
			outcome := publishOne(t, pub, topic, debounced("doc-7", after, maxWait, payload))
			letters.WriteString(outcomeLetters([]redisdelay.Outcome{outcome}))
			switch outcome {
			case redisdelay.OutcomeScheduled:
				want = append(want, payload)
			case redisdelay.OutcomeReplaced:
				want[len(want)-1] = payload
			}
			<-tick.C
		}
		var got []string
		deadline := time.After(maxWait + 5*time.Second)
		for len(got) < len(want) {
			select {
			case p := <-delivered:
				got = append(got, p)
			case <-deadline:
				t.Fatalf("delivered %v, want %v (outcomes %s)", got, want, letters.String())
			}
		}
		t.Logf("outcomes %s, delivered %v", letters.String(), got)
		assert.Equal(t, want, got, "each round delivers its last state (outcomes %s)", letters.String())
		assert.GreaterOrEqual(t, strings.Count(letters.String(), "s"), 3, "each ack frees the key for a new round: %s", letters.String())
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Empty(t, delivered, "nothing more")
	})
}

// TestTheWindowsCopyFollowsReplaceAndCancel: a replace, in its own Publish call or in the call
// that stored the message, replaces the window's copy too, so a group that registers within the
// window after the acks receives the last state, while the keys are free already; a message
// cancelled by key reaches no group that registers later; and once the window ends, the
// topic's keys are back to the baseline.
func TestTheWindowsCopyFollowsReplaceAndCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		prefix := "c" + watermill.NewShortUUID() + ":"
		topic := newTopic()
		const window = 1500 * time.Millisecond
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.KeyPrefix, c.OnDuplicate = prefix, redisdelay.ReplaceExisting })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix}, errorLogger{})
		require.NoError(t, err)
		group := func(name string) <-chan *message.Message {
			return subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
				c.KeyPrefix, c.ConsumerGroup, c.NewGroupWindow = prefix, name, window
			}), topic)
		}
		chA := group("a")
		require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("k1", 300*time.Millisecond, "v1")))
		require.Equal(t, redisdelay.OutcomeReplaced, publishOne(t, pub, topic, keyed("k1", 300*time.Millisecond, "v2")))
		outcomes, err := pub.PublishWithResult(topic, keyed("k2", 300*time.Millisecond, "w1"), keyed("k2", 300*time.Millisecond, "w2"))
		require.NoError(t, err)
		require.Equal(t, "sr", outcomeLetters(outcomes))
		require.Equal(t, redisdelay.OutcomeScheduled, publishOne(t, pub, topic, keyed("k3", time.Hour, "cancelled")))
		_, err = in.Cancel(context.Background(), topic, redisdelay.ByKey("k3"))
		require.NoError(t, err)
		lastStates := func(ch <-chan *message.Message, name string) {
			got := map[string]bool{}
			for range 2 {
				msg := receive(t, ch, 5*time.Second)
				got[string(msg.Payload)] = true
				msg.Ack()
			}
			assert.Equal(t, map[string]bool{"v2": true, "w2": true}, got, "the last states in group %s", name)
			waitDrained(t, in, topic, name)
		}
		lastStates(chA, "a")
		for _, key := range []string{"k1", "k2", "k3"} {
			st, err := in.Status(context.Background(), topic, redisdelay.ByKey(key))
			require.NoError(t, err)
			assert.False(t, st.Live, "%s is free while the window keeps a copy: %+v", key, st)
		}
		lastStates(group("b"), "b") // registered once a acked: it gets the window's copies
		windowEnded(t, b, prefix, topic, window)
		keysBackToBaseline(t, b, prefix, topic, "a", "b")
	})
}
