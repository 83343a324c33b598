package redisdelay_test

import (
	"context"
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
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// debounced returns a keep-later message with key and payload, due after d, with a debounce cap
// of maxWait (0: the Publisher's DebounceMaxWait).
func debounced(key string, d, maxWait time.Duration, payload string) *message.Message {
	msg := redisdelay.WithDebounce(message.NewMessage(watermill.NewUUID(), []byte(payload)), key, maxWait)
	delay.Message(msg, delay.For(d))
	return msg
}

// Letters of outcomes, to compare a run of publishes at a glance.
func outcomeLetters(outcomes []redisdelay.Outcome) string {
	var b strings.Builder
	for _, o := range outcomes {
		b.WriteString(map[redisdelay.Outcome]string{redisdelay.OutcomeScheduled: "s", redisdelay.OutcomeReplaced: "r", redisdelay.OutcomeDuplicate: "d"}[o])
	}
	return b.String()
}

// TestDebounceWithAMaxWaitFiresNoLaterThanItsCap republishes a key every minute with a delay of
// two, on the virtual clock, for ten minutes: each debounce fires once, exactly at its cap, five
// minutes after the first publish of its round, never before it is due. Without a cap, the same
// run fires once, two minutes after the last publish (today's debounce).
func TestDebounceWithAMaxWaitFiresNoLaterThanItsCap(t *testing.T) {
	const every, after, maxWait = time.Minute, 2 * time.Minute, 5 * time.Minute
	for _, tc := range []struct {
		name             string
		config, perMsg   time.Duration
		outcomes         string
		payloads         []string
		dueAfterStart    []time.Duration
		uncappedFirstMsg bool
		cappedFirstMsg   bool
	}{
		{name: "cap from the config", config: maxWait, outcomes: "srrrdsrrrd", payloads: []string{"3", "8"}, dueAfterStart: []time.Duration{5 * time.Minute, 10 * time.Minute}},
		{name: "cap from the metadata", perMsg: maxWait, outcomes: "srrrdsrrrd", payloads: []string{"3", "8"}, dueAfterStart: []time.Duration{5 * time.Minute, 10 * time.Minute}},
		// The first publish asks for no cap: the cap counts from the second, at minute 1.
		{name: "cap from the first publish that asks for one", perMsg: maxWait, uncappedFirstMsg: true, outcomes: "srrrrdsrrr", payloads: []string{"4", "9"}, dueAfterStart: []time.Duration{6 * time.Minute, 11 * time.Minute}},
		// Only the first publish asks for a cap: it holds for the duplicates without one; the
		// next round's message, published without one, has none (the old cap names the old
		// message).
		{name: "cap of the first publish only", perMsg: maxWait, cappedFirstMsg: true, outcomes: "srrrdsrrrr", payloads: []string{"3", "9"}, dueAfterStart: []time.Duration{5 * time.Minute, 11 * time.Minute}},
		{name: "no cap", outcomes: "srrrrrrrrr", payloads: []string{"9"}, dueAfterStart: []time.Duration{11 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Three partitions: the key's cap lives in its partition.
			// No new-group window, which would keep a fired message, and so its key, while it lasts.
			q := redisdelaytest.New(t, redisdelaytest.Options{
				Publisher:  redisdelay.PublisherConfig{DebounceMaxWait: tc.config, Partitions: 3},
				Subscriber: redisdelay.SubscriberConfig{NewGroupWindow: -1},
			})
			const topic = "search.reindex"
			q.Consume(topic, "indexer")
			start := q.Now()
			var outcomes []redisdelay.Outcome
			for i := range 10 {
				wait := tc.perMsg
				if (i == 0 && tc.uncappedFirstMsg) || (i > 0 && tc.cappedFirstMsg) {
					wait = 0
				}
				res, err := q.Publisher().PublishWithResult(topic, debounced("doc-7", after, wait, strconv.Itoa(i)))
				require.NoError(t, err)
				outcomes = append(outcomes, res...)
				q.Advance(every)
			}
			q.Advance(after)
			assert.Equal(t, tc.outcomes, outcomeLetters(outcomes))
			got := q.Received("indexer")
			require.Len(t, got, len(tc.payloads), "deliveries: %v", got)
			for i, d := range got {
				assert.Equal(t, tc.payloads[i], string(d.Payload), "delivery %d", i)
				assert.Equal(t, start.Add(tc.dueAfterStart[i]), d.DueAt, "delivery %d: due at its cap", i)
				assert.False(t, d.At.Before(d.DueAt), "delivery %d handed out at %s, before its due time %s", i, d.At, d.DueAt)
				assert.Equal(t, 1, d.Attempt)
			}
		})
	}
}

// TestDebounceCapHoldsForAParkedMessage publishes to a topic with no consumer group yet: the
// message waits in the parked set, where the cap pulls a later due time back as in a group.
func TestDebounceCapHoldsForAParkedMessage(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	const topic = "reports.rebuild"
	start := q.Now()
	publish := func(d time.Duration, payload string) redisdelay.Outcome {
		res, err := q.Publisher().PublishWithResult(topic, debounced("r", d, 30*time.Minute, payload))
		require.NoError(t, err)
		return res[0]
	}
	require.Equal(t, redisdelay.OutcomeScheduled, publish(10*time.Minute, "1"))
	q.Advance(5 * time.Minute)
	require.Equal(t, redisdelay.OutcomeReplaced, publish(time.Hour, "2"))
	q.RequireScheduled(t, topic, "r", start.Add(30*time.Minute))
	require.Equal(t, redisdelay.OutcomeDuplicate, publish(2*time.Hour, "3"), "no later than the cap")

	q.Consume(topic, "reporter") // takes over the parked message
	q.Advance(time.Hour)
	d := q.RequireReceived(t, topic, "reporter", "r")
	assert.Equal(t, "2", string(d.Payload))
	assert.Equal(t, start.Add(30*time.Minute), d.DueAt)
	assert.Len(t, q.Received("reporter"), 1)
}

// TestDebounceCapIsGoneOnceItsMessageFired checks on the virtual clock that the key's cap
// expires by itself after the message fired: the topic's keys return to their baseline.
func TestDebounceCapIsGoneOnceItsMessageFired(t *testing.T) {
	const maxWait = 5 * time.Minute
	q := redisdelaytest.New(t, redisdelaytest.Options{
		Publisher:  redisdelay.PublisherConfig{DebounceMaxWait: maxWait},
		Subscriber: redisdelay.SubscriberConfig{NewGroupWindow: -1},
	})
	const topic = "search.reindex"
	ctx := context.Background()
	q.Consume(topic, "indexer")
	// A first message of the key, without a cap: the baseline holds the keys that outlive a
	// message (the seq, the lease set's marker).
	q.Publish(t, topic, redisdelay.WithKey(message.NewMessage("warm-up", nil), "doc-7"))
	q.Settle()
	// The topic's keys without the call and claim tokens, which expire by themselves.
	topicKeys := func() []string {
		all, err := q.Client().Keys(ctx, redisdelay.DefaultKeyPrefix+"{"+topic+"}*").Result()
		require.NoError(t, err)
		var keys []string
		for _, k := range all {
			if !strings.Contains(k, ":call:") && !strings.Contains(k, ":claim:") {
				keys = append(keys, k)
			}
		}
		return keys
	}
	baseline := topicKeys()
	capKey := redisdelay.DebounceKeyForTest("", topic, 1, "doc-7")

	for i := range 3 {
		q.Publish(t, topic, debounced("doc-7", 2*time.Minute, 0, strconv.Itoa(i)))
		q.Advance(time.Minute)
	}
	assert.Contains(t, topicKeys(), capKey)
	q.Advance(2 * time.Minute)
	require.Len(t, q.Received("indexer"), 2)
	assert.Contains(t, topicKeys(), capKey, "kept until a max wait after the cap")
	q.Advance(maxWait + time.Second) // to the cap, 5 min after the first publish, and a max wait past it
	assert.ElementsMatch(t, baseline, topicKeys())
}

// TestDebouncedKeyRepublishedForeverFiresOnceByItsMaxWait is the real-time check on every
// backend: a key republished every 40 ms with a delay of 300 ms (so that, uncapped, it would
// never fire) fires once, within its max wait of 500 ms after the first publish, never before
// its due time; once it fired and the publishing stopped, nothing more arrives, and the topic's
// keys return to their baseline when the cap expires.
func TestDebouncedKeyRepublishedForeverFiresOnceByItsMaxWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const every, after, maxWait = 40 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond
		const partitions = 3
		// Under -race on a busy machine a claim can come late; it is never early.
		const lateness = 2 * time.Second
		ctx := context.Background()
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.Partitions, c.DebounceMaxWait = partitions, maxWait })
		in := newInspector(t, b, partitions)
		// No new-group window, so that the keys left are those of the baseline at once (the
		// window's copies go when it ends; see TestAGroupRegisteredWithinTheWindowAfterTheAcks…).
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions, c.NewGroupWindow = partitions, -1 }), topic)
		// The keys of every partition of the topic, without the call and claim tokens, which
		// expire by themselves.
		persistent := func() []string {
			all, err := scanKeys(ctx, b, redisdelay.DefaultKeyPrefix+"{"+topic+"*")
			require.NoError(t, err)
			var keys []string
			for _, k := range all {
				if !strings.Contains(k, ":call:") && !strings.Contains(k, ":claim:") {
					keys = append(keys, k)
				}
			}
			return keys
		}
		// A first message of the key, without a cap, claimed and acked: the baseline holds the
		// partition's keys that outlive a message (its seq, its lease set's marker).
		require.NoError(t, pub.Publish(topic, keyed("k", 0, "warm-up")))
		receive(t, ch, 5*time.Second).Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		baseline := persistent()

		first := time.Now()
		var outcomes []redisdelay.Outcome
		var msg *message.Message
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; msg == nil; i++ {
			res, err := pub.PublishWithResult(topic, debounced("k", after, 0, strconv.Itoa(i)))
			require.NoError(t, err)
			outcomes = append(outcomes, res...)
			select {
			case msg = <-ch:
			case <-tick.C:
			}
			require.Less(t, time.Since(first), maxWait+lateness, "no delivery within the max wait")
		}
		arrived := time.Now()
		due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
		require.NoError(t, err)
		assert.False(t, arrived.Before(due), "handed out at %s, before its due time %s", arrived, due)
		assert.False(t, due.After(first.Add(maxWait+50*time.Millisecond)), "due at %s, more than the max wait after the first publish at %s", due, first)
		letters := outcomeLetters(outcomes)
		assert.Equal(t, 1, strings.Count(letters, "s"), "one message for the key, replaced or kept: %s", letters)
		assert.Greater(t, strings.Count(letters, "r"), 2, "the debounce pushed the message: %s", letters)
		msg.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		select {
		case extra := <-ch:
			t.Fatalf("a second delivery, %q", extra.Payload)
		default:
		}

		capKey := redisdelay.DebounceKeyForTest("", topic, partitions, "k")
		require.Eventually(t, func() bool {
			if b.miniredis != nil {
				// miniredis lets keys expire only when told that time passed.
				b.miniredis.FastForward(50 * time.Millisecond)
			}
			return b.client.Exists(ctx, capKey).Val() == 0
		}, 10*time.Second, 20*time.Millisecond, "the cap expires after it")
		assert.Equal(t, baseline, persistent(), "the topic's keys")
	})
}

// TestDebounceWithoutAMaxWaitKeepsPushing is today's debounce, on every backend: republished
// every 40 ms with a delay of 500 ms, the key does not fire while it is republished, then fires
// once with the last payload.
func TestDebounceWithoutAMaxWaitKeepsPushing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const every, after, publishes = 40 * time.Millisecond, 500 * time.Millisecond, 20
		topic := newTopic()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) { c.OnDuplicate = redisdelay.KeepLater })
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		var outcomes []redisdelay.Outcome
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := range publishes {
			res, err := pub.PublishWithResult(topic, keyed("k", after, strconv.Itoa(i)))
			require.NoError(t, err)
			outcomes = append(outcomes, res...)
			select {
			case msg := <-ch:
				t.Fatalf("delivered while republished: %q", msg.Payload)
			case <-tick.C:
			}
		}
		assert.Equal(t, "s"+strings.Repeat("r", publishes-1), outcomeLetters(outcomes))
		msg := receive(t, ch, 10*time.Second)
		assert.Equal(t, strconv.Itoa(publishes-1), string(msg.Payload))
		msg.Ack()
		waitDrained(t, newInspector(t, b, 1), topic, redisdelay.DefaultConsumerGroup)
	})
}

func TestBadDebounceMaxWaitIsRefusedAndNothingIsStored(t *testing.T) {
	b := embeddedRedis(t)
	topic := newTopic()
	pub := newPublisher(t, b)
	require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
	for _, tc := range []struct {
		name, value, err string
		edit             func(*message.Message)
	}{
		{name: "not a duration", value: "soon", err: "want a Go duration"},
		{name: "zero", value: "0s", err: "want at least 1µs"},
		{name: "negative", value: "-1m", err: "want at least 1µs"},
		{name: "under a microsecond", value: "999ns", err: "want at least 1µs"},
		{name: "another policy", value: "1m", err: `needs the "keep-later" duplicate policy, not "replace"`, edit: func(m *message.Message) {
			m.Metadata.Set(redisdelay.OnDuplicateMetadataKey, string(redisdelay.ReplaceExisting))
		}},
		{name: "no key", value: "1m", err: "needs a message key", edit: func(m *message.Message) { delete(m.Metadata, redisdelay.KeyMetadataKey) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := redisdelay.WithDebounce(message.NewMessage("bad-"+tc.name, nil), "fine", 0)
			bad.Metadata.Set(redisdelay.DebounceMaxWaitMetadataKey, tc.value)
			if tc.edit != nil {
				tc.edit(bad)
			}
			err := pub.Publish(topic, debounced("good", time.Minute, time.Minute, ""), bad)
			var me *redisdelay.MessageError
			require.ErrorAs(t, err, &me)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
			assert.Equal(t, topic, me.Topic)
			assert.Equal(t, "bad-"+tc.name, me.UUID)
			assert.Equal(t, redisdelay.DebounceMaxWaitMetadataKey, me.Key)
			assert.Equal(t, tc.value, me.Value)
			for _, part := range []string{topic, me.UUID, redisdelay.DebounceMaxWaitMetadataKey, tc.value, tc.err} {
				assert.Contains(t, err.Error(), part)
			}
		})
	}
	assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "nothing of the calls is stored")
	assert.Zero(t, b.client.Exists(context.Background(), redisdelay.DebounceKeyForTest("", topic, 1, "good")).Val(), "no cap is stored")
}

// TestDebounceMaxWaitIsNotStoredWithTheMessage: the cap is read by Publish, like the key's
// policy, and a delivery does not carry it.
func TestDebounceMaxWaitIsNotStoredWithTheMessage(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	q.Consume("t", "g")
	q.Publish(t, "t", debounced("k", time.Minute, time.Hour, "p"))
	q.Advance(time.Minute)
	d := q.RequireReceived(t, "t", "g", "k")
	assert.NotContains(t, d.Metadata, redisdelay.DebounceMaxWaitMetadataKey)
	assert.Equal(t, "k", d.Key)
}
