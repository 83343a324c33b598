package redisdelay_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// While a batch is open, each item added waits in a hash field of its own, so that adding one
// costs O(item); the batch gets them all, in order, when it closes: by time, when full, by
// FlushBatch, or when its due time passed unclaimed and the next item opens another batch. A
// cancelled batch drops them, and once every batch is acked no field is left.
func TestBatchItemsAddedOneByOneArriveInOrderAndLeaveNoFields(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 4, MaxWait: 400 * time.Millisecond})
		in := newInspector(t, b, 1)
		chA := subscribe(t, newSubscriber(t, b, inGroupWithoutWindow("a")), topic)
		subB := newSubscriber(t, b, inGroupWithoutWindow("b"))
		require.NoError(t, subB.SubscribeInitialize(topic))
		messages := redisdelay.MessagesKeyForTest("", topic)
		// One publish call per item, so that each item joins a batch stored by an earlier call.
		add := func(bk string, names ...string) {
			for _, name := range names {
				publishScheduled(t, pub, topic, item(bk, name))
			}
		}

		add("time", "t0", "t1", "t2")
		assert.Equal(t, int64(4), b.client.HLen(ctx, messages).Val(), "the batch's field and one per item")
		add("full", "f0", "f1", "f2", "f3")
		add("flush", "x0", "x1")
		n, err := batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("flush")))
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		add("cancel", "c0", "c1")
		n, err = batchItems(in.Cancel(ctx, topic, redisdelay.ByBatchKey("cancel")))
		require.NoError(t, err)
		assert.Equal(t, 2, n)

		got := map[string][]string{}
		for range 3 {
			batch := receive(t, chA, 5*time.Second)
			got[batch.Metadata.Get(redisdelay.BatchKeyMetadataKey)+" "+batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey)] = itemsOf(t, batch)
			batch.Ack()
		}
		assert.Equal(t, map[string][]string{
			"time " + redisdelay.BatchTriggerTime:   {"t0", "t1", "t2"},
			"full " + redisdelay.BatchTriggerSize:   {"f0", "f1", "f2", "f3"},
			"flush " + redisdelay.BatchTriggerFlush: {"x0", "x1"},
		}, got)
		waitDrained(t, in, topic, "a") // the cancelled batch is not held

		// Group a paused, b not subscribed: nobody claims the batch when it is due, and the next
		// item, which opens a new batch, closes it with its items.
		require.NoError(t, in.Pause(ctx, topic, "a"))
		add("late", "l0", "l1")
		waitStats(t, in, topic, "a", "holding the batch due, unclaimed", func(s redisdelay.GroupStats) bool { return s.Due == 1 && s.InFlight == 0 })
		add("late", "l2")
		n, err = batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("late")))
		require.NoError(t, err)
		assert.Equal(t, 1, n, "the next item opened a new batch")
		require.NoError(t, in.Resume(ctx, topic, "a"))
		var late []string
		for range 2 {
			batch := receive(t, chA, 5*time.Second)
			late = append(late, strings.Join(itemsOf(t, batch), ","))
			batch.Ack()
		}
		sort.Strings(late)
		assert.Equal(t, []string{"l0,l1", "l2"}, late)

		// Group b takes its batches too; then nothing is stored.
		chB := subscribe(t, subB, topic)
		for range 5 {
			receive(t, chB, 5*time.Second).Ack()
		}
		waitDrained(t, in, topic, "b")
		require.Eventually(t, func() bool { return b.client.HLen(ctx, messages).Val() == 0 }, 5*time.Second, 10*time.Millisecond,
			"fields left: %v", b.client.HKeys(ctx, messages).Val())
	})
}

// The items of one publish call are written together at its end (one HSET), or before a batch
// they fill closes: a call whose items join batches opened by an earlier call, fill one, open
// the next batch of the same key and join another key's batch delivers every item once, in
// order, in the batch it joined.
func TestOneCallsItemsFillAndOpenBatchesInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 3, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, inGroupWithoutWindow("a")), topic)

		publishScheduled(t, pub, topic, item("a", "a1"), item("b", "b1"))
		publishScheduled(t, pub, topic, item("a", "a2"), item("b", "b2"), item("a", "a3"), item("a", "a4"), item("b", "b3"), item("a", "a5"))
		n, err := batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("a")))
		require.NoError(t, err)
		assert.Equal(t, 2, n, "the batch that a4 opened")
		got := map[string][]string{}
		for range 3 {
			batch := receive(t, ch, 5*time.Second)
			got[batch.Metadata.Get(redisdelay.BatchKeyMetadataKey)+" "+batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey)] = itemsOf(t, batch)
			batch.Ack()
		}
		assert.Equal(t, map[string][]string{
			"a " + redisdelay.BatchTriggerSize:  {"a1", "a2", "a3"},
			"b " + redisdelay.BatchTriggerSize:  {"b1", "b2", "b3"},
			"a " + redisdelay.BatchTriggerFlush: {"a4", "a5"},
		}, got)
		waitDrained(t, in, topic, "a")
		messages := redisdelay.MessagesKeyForTest("", topic)
		require.Eventually(t, func() bool { return b.client.HLen(ctx, messages).Val() == 0 }, 5*time.Second, 10*time.Millisecond,
			"fields left: %v", b.client.HKeys(ctx, messages).Val())
	})
}

// Adding an item to a batch of 10,000 items costs about what a publish without a batch costs
// (on redis-server, by INFO commandstats): nothing rewrites the stored batch. The batch then
// arrives with every item in order.
func TestAddingABatchItemCostsTheSameWhateverTheBatchHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		held := 500
		if b.name == "redis" {
			held = 10_000
		}
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 1 << 30, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, inGroupWithoutWindow(redisdelay.DefaultConsumerGroup))
		require.NoError(t, sub.SubscribeInitialize(topic))
		// 50 bytes: 10,200 items stay below MaxBatchBytes.
		payload := []byte(strings.Repeat("p", 50))
		var names []string
		var msgs []*message.Message
		for i := range held {
			names = append(names, "i"+strconv.Itoa(i))
			msgs = append(msgs, redisdelay.WithBatchKey(message.NewMessage(names[i], payload), "big"))
			if len(msgs) == 1000 || i == held-1 {
				publishScheduled(t, pub, topic, msgs...)
				msgs = nil
			}
		}
		const adds = 200
		// redisTime returns the Redis time, in µs, of the scripts that f runs (0 off redis-server).
		redisTime := func(f func()) float64 {
			c, ok := b.client.(*redis.Client)
			if !ok || b.name != "redis" {
				f()
				return 0
			}
			before := scriptCPU(t, c)
			f()
			return float64(scriptCPU(t, c).usec - before.usec)
		}
		// Adds to the big batch and to a small one alternate in blocks, so that a load spike on
		// the machine (which inflates Redis's own timing too) falls on both alike.
		var addTime, smallTime float64
		for block := range 10 {
			addTime += redisTime(func() {
				for i := range adds / 10 {
					name := "i" + strconv.Itoa(held+block*(adds/10)+i)
					names = append(names, name)
					publishScheduled(t, pub, topic, redisdelay.WithBatchKey(message.NewMessage(name, payload), "big"))
				}
			})
			smallTime += redisTime(func() {
				for range adds / 10 {
					publishScheduled(t, pub, topic, redisdelay.WithBatchKey(message.NewMessage(watermill.NewUUID(), payload), "small"))
				}
			})
		}
		perAdd, perSmall := addTime/adds, smallTime/adds
		if b.name == "redis" {
			t.Logf("Redis time per item added to a batch of %d: %.1f µs; to a batch of at most %d: %.1f µs", held, perAdd, adds, perSmall)
			// A rewrite of the stored batch (500 KB) would cost about 100 times an item added to a
			// small batch (the same script path); 3 times leaves room for the machine's noise.
			// (Against a plain publish, which has a path of its own and got cheaper than a batch
			// item's, the ratio measured the plain path instead.)
			assert.Less(t, perAdd, 3*perSmall, "adding an item costs O(item)")
		}

		n, err := batchItems(in.RunNow(ctx, topic, redisdelay.ByBatchKey("big")))
		require.NoError(t, err)
		assert.Equal(t, held+adds, n)
		ch := subscribe(t, sub, topic)
		batch := receive(t, ch, 10*time.Second)
		assert.Equal(t, names, itemsOf(t, batch))
		batch.Ack()
	})
}

// MaxBytes is at most MaxBatchBytes, and MaxBatchBytes when zero: a batch of large items is
// released by size once it reaches it.
func TestBatchBytesAreCappedByMaxBatchBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		_, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, Batching: map[string]redisdelay.BatchConfig{
			topic: {MaxItems: 10, MaxWait: time.Second, MaxBytes: redisdelay.MaxBatchBytes + 1}}}, errorLogger{})
		assert.Error(t, err)

		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 1000, MaxWait: time.Hour})
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		payload := []byte(strings.Repeat("b", 100_000))
		var names []string
		for i := range 11 {
			names = append(names, "big"+strconv.Itoa(i))
			publishScheduled(t, pub, topic, redisdelay.WithBatchKey(message.NewMessage(names[i], payload), "k"))
		}
		batch := receive(t, ch, 5*time.Second)
		assert.Equal(t, redisdelay.BatchTriggerSize, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
		assert.Equal(t, names, itemsOf(t, batch), "10 items stay below 1 MiB, the 11th reaches it")
		batch.Ack()
	})
}
