package redisdelay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// unreadableNames are names that logs, metric labels, terminals or URLs cannot carry: control
// characters, characters that turn the direction of text (Bidi_Control), and names longer than
// their limit, a 1 MB name of parts each under MaxNameLength included.
var unreadableNames = []string{"bad\xff\xfe", "bell\a", "clear\x1b[2J", "osc\x1b]52;c;aGk=\x07", "nul\x00", "next\u0085line", ".", "..",
	"invoice-\u202Efdp.exe", "rtl-mark\u200F", "isolate\u2066x\u2069", "arabic-mark\u061C", "embed\u202Ax\u202C",
	strings.Repeat("t", redisdelay.MaxNameLength+1),
	strings.Repeat("t", 400) + strings.Repeat(redisdelay.DeadLetterInfix+strings.Repeat("g", 400), 2600),
}

// TestEveryNameHasOneLimitWholeAndTheDeadLetterTopicOfLongestNamesIsValid: a name is limited
// as a whole (MaxNameLength, MaxDeadLetterTopicLength with DeadLetterInfix), and the longest
// topic and group still subscribe, and so does their dead-letter topic, whose own dead-letter
// topic is exactly at the limit.
func TestEveryNameHasOneLimitWholeAndTheDeadLetterTopicOfLongestNamesIsValid(t *testing.T) {
	longest := strings.Repeat("t", redisdelay.MaxNameLength)
	group := strings.Repeat("g", redisdelay.MaxNameLength)
	dlt := redisdelay.DefaultDeadLetterTopic(longest, group)
	dlt2 := redisdelay.DefaultDeadLetterTopic(dlt, group)
	require.Len(t, dlt2, redisdelay.MaxDeadLetterTopicLength)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{longest, true},
		{longest + "t", false},
		{dlt, true},
		{dlt2, true},
		{dlt2 + "g", false},
		{strings.Repeat("a"+redisdelay.DeadLetterInfix, 200), false},
	} {
		err := redisdelay.ValidateName("topic", tc.name)
		if tc.ok {
			assert.NoError(t, err, "%d bytes", len(tc.name))
			continue
		}
		require.ErrorIs(t, err, redisdelay.ErrInvalidName, "%d bytes", len(tc.name))
		assert.Contains(t, err.Error(), strconv.Itoa(len(tc.name))+" bytes")
	}

	b := embeddedRedis(t)
	sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.ConsumerGroup = group })
	require.NoError(t, sub.SubscribeInitialize(longest), "the longest topic and group have a valid dead-letter topic")
	require.NoError(t, sub.SubscribeInitialize(dlt), "their dead-letter topic subscribes too")
	// The dead letters of dead letters, with the longest names, would dead-letter further: refused.
	require.ErrorIs(t, sub.SubscribeInitialize(dlt2), redisdelay.ErrInvalidName)
	_, err := sub.Subscribe(context.Background(), dlt2)
	require.ErrorIs(t, err, redisdelay.ErrInvalidName)
	assert.Contains(t, err.Error(), "dead-letter topic")
	assert.Contains(t, err.Error(), strconv.Itoa(len(dlt2)+len(redisdelay.DeadLetterInfix)+redisdelay.MaxNameLength)+" bytes")
}

func TestUnreadableNamesAreRefusedBeforeAnythingIsStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		prefix := "names-" + watermill.NewShortUUID() + ":"
		metrics := newHookRecorder()
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
			c.KeyPrefix, c.Metrics = prefix, metrics
			c.Batching = map[string]redisdelay.BatchConfig{"batched": {MaxItems: 10, MaxWait: time.Minute}}
		})
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.KeyPrefix, c.Metrics = prefix, metrics })
		in, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.client, KeyPrefix: prefix, Metrics: metrics}, errorLogger{})
		require.NoError(t, err)

		for _, name := range unreadableNames {
			assert.ErrorIs(t, redisdelay.ValidateName("topic", name), redisdelay.ErrInvalidName, "%q", name)
			require.NotPanics(t, func() { err = pub.Publish(name, message.NewMessage("m", nil)) }, "%q", name)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "publish to %q", name)
			_, err = sub.Subscribe(ctx, name)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "subscribe to %q", name)
			assert.ErrorIs(t, sub.SubscribeInitialize(name), redisdelay.ErrInvalidName, "initialize %q", name)
			_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: b.client, KeyPrefix: prefix, ConsumerGroup: name}, nil)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "consumer group %q", name)
			_, err = in.Stats(ctx, name)
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "stats of %q", name)
			assert.ErrorIs(t, in.Pause(ctx, "orders", name), redisdelay.ErrInvalidName, "pause group %q", name)
			_, err = in.Cancel(ctx, name, redisdelay.ByKey("k"))
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "cancel on %q", name)
			_, err = in.RunNow(ctx, name, redisdelay.ByBatchKey("k"))
			assert.ErrorIs(t, err, redisdelay.ErrInvalidName, "flush on %q", name)
			if name == "." || name == ".." {
				continue // fine as keys
			}
			// Message keys and batch keys are refused likewise, as ErrInvalidKey.
			err = pub.Publish("orders", redisdelay.WithKey(message.NewMessage("keyed", nil), name))
			assert.ErrorIs(t, err, redisdelay.ErrInvalidKey, "key %q", name)
			err = pub.Publish("batched", redisdelay.WithBatchKey(message.NewMessage("item", nil), name))
			assert.ErrorIs(t, err, redisdelay.ErrInvalidKey, "batch key %q", name)
		}
		assert.Empty(t, keysUnder(t, b, prefix), "nothing is stored")
		heard := metrics.heard()
		for _, name := range unreadableNames {
			assert.False(t, heard[name], "no metric hears of %q", name)
		}
		topics, err := in.Topics(ctx)
		require.NoError(t, err)
		assert.Empty(t, topics)
	})
}

// TestTheKeyLayoutKnowsTheDeadLetterInfix: the key layout gives a topic whose name holds
// DeadLetterInfix the hash slot of the part before it, so that dead-lettering is one script
// call on Redis Cluster; it must read the same infix.
func TestTheKeyLayoutKnowsTheDeadLetterInfix(t *testing.T) {
	assert.Equal(t, redisdelay.DeadLetterInfix, store.DeadLetterInfix)
}
