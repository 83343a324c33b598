package redisdelay_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func batchingPublisher(t *testing.T, b backend, topic string, cfg redisdelay.BatchConfig) *redisdelay.Publisher {
	return publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
		c.Batching = map[string]redisdelay.BatchConfig{topic: cfg}
	})
}

func delayed(msg *message.Message) *message.Message {
	delay.Message(msg, delay.For(time.Minute))
	return msg
}

func parcel(area string, n int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte("parcel "+strconv.Itoa(n)+"\x00\xff"))
	msg.Metadata.Set("parcel", strconv.Itoa(n))
	return redisdelay.WithBatchKey(msg, area)
}

func TestBatchIsReleasedAtOnceWhenFullWithItsItemsByteForByte(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 3, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		chA := subscribe(t, newSubscriber(t, b, inGroup("a")), topic)
		chB := subscribe(t, newSubscriber(t, b, inGroup("b")), topic)

		sent := []*message.Message{parcel("north", 1), parcel("north", 2)}
		published := time.Now()
		require.NoError(t, pub.Publish(topic, sent...))
		// Not full: the open batch waits for MaxWait, scheduled in each group, nothing due.
		for _, g := range []string{"a", "b"} {
			s := statsOf(t, in, topic, g)
			assert.Equal(t, [3]int64{1, 0, 0}, [3]int64{s.Scheduled, s.Due, s.InFlight}, "group %s: scheduled, due, in flight", g)
			assert.WithinDuration(t, published.Add(time.Hour), s.NextDue, time.Second, "group %s", g)
		}
		third := parcel("north", 3)
		sent = append(sent, third)
		start := time.Now()
		require.NoError(t, pub.Publish(topic, third))

		for _, ch := range []<-chan *message.Message{chA, chB} {
			batch := receive(t, ch, 5*time.Second)
			assert.Less(t, time.Since(start), time.Second, "released by the item that filled it, not by MaxWait")
			assert.Equal(t, "north", batch.Metadata.Get(redisdelay.BatchKeyMetadataKey))
			assert.Equal(t, "3", batch.Metadata.Get(redisdelay.BatchItemsMetadataKey))
			assert.Equal(t, redisdelay.BatchTriggerSize, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
			items, err := redisdelay.UnpackBatch(batch, nil)
			require.NoError(t, err)
			require.Len(t, items, 3)
			for i, item := range items {
				assert.Equal(t, sent[i].UUID, item.UUID)
				assert.Equal(t, sent[i].Payload, item.Payload, "byte for byte")
				assert.Equal(t, sent[i].Metadata.Get("parcel"), item.Metadata.Get("parcel"))
			}
			batch.Ack()
		}
	})
}

func TestBatchIsReleasedMaxWaitAfterItsFirstItemNeverEarly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 100, MaxWait: 300 * time.Millisecond})
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		first := time.Now()
		require.NoError(t, pub.Publish(topic, parcel("south", 1)))
		require.NoError(t, pub.Publish(topic, parcel("south", 2)))
		batch := receive(t, ch, 5*time.Second)
		assert.GreaterOrEqual(t, time.Since(first), 300*time.Millisecond, "never before MaxWait")
		assert.Equal(t, redisdelay.BatchTriggerTime, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
		assert.Equal(t, "2", batch.Metadata.Get(redisdelay.BatchItemsMetadataKey))
		batch.Ack()

		// The next item opens a new batch.
		require.NoError(t, pub.Publish(topic, parcel("south", 3)))
		batch = receive(t, ch, 5*time.Second)
		assert.Equal(t, "1", batch.Metadata.Get(redisdelay.BatchItemsMetadataKey))
		batch.Ack()
	})
}

func TestFlushAndCancelBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 100, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		require.NoError(t, pub.Publish(topic, parcel("east", 1), parcel("east", 2), parcel("west", 3)))

		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateScheduled})
		require.NoError(t, err)
		require.Len(t, page.Messages, 2, "an open batch is listed as one scheduled message")
		for _, m := range page.Messages {
			assert.False(t, m.Vanished)
			assert.Empty(t, m.Key, "a batch has no message key")
			assert.Contains(t, []string{"east", "west"}, m.Metadata[redisdelay.BatchKeyMetadataKey])
		}
		n, err := batchItems(in.Cancel(context.Background(), topic, redisdelay.ByBatchKey("west")))
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		n, err = batchItems(in.RunNow(context.Background(), topic, redisdelay.ByBatchKey("east")))
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		batch := receive(t, ch, 5*time.Second)
		assert.Equal(t, "east", batch.Metadata.Get(redisdelay.BatchKeyMetadataKey))
		assert.Equal(t, redisdelay.BatchTriggerFlush, batch.Metadata.Get(redisdelay.BatchTriggerMetadataKey))
		batch.Ack()
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // the cancelled batch is not held

		n, err = batchItems(in.RunNow(context.Background(), topic, redisdelay.ByBatchKey("east")))
		require.NoError(t, err)
		assert.Zero(t, n, "no batch is open any more")
	})
}

func TestRacingPublishersLoseAndDoubleNoBatchItem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		const publishers, each, size = 8, 50, 10
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: size, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		ch := subscribe(t, newSubscriber(t, b, nil), topic)
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					assert.NoError(t, pub.Publish(topic, parcel("hub", p*each+i)))
				}
			}()
		}
		wg.Wait()
		seen := map[string]int{}
		for range publishers * each / size {
			batch := receive(t, ch, 5*time.Second)
			items, err := redisdelay.UnpackBatch(batch, nil)
			require.NoError(t, err)
			assert.Len(t, items, size, "every batch released by size holds exactly MaxItems")
			for _, item := range items {
				seen[item.Metadata.Get("parcel")]++
			}
			batch.Ack()
		}
		assert.Len(t, seen, publishers*each, "no item lost")
		for n, count := range seen {
			assert.Equal(t, 1, count, "item %s doubled", n)
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup) // no batch left, not even an open one
	})
}

func TestBadBatchInputIsRefusedAndNothingIsStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 1, MaxWait: time.Hour})
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		other := newTopic()
		for _, tc := range []struct {
			name, topic string
			msg         *message.Message
			key         string
		}{
			{"empty batch key", topic, redisdelay.WithBatchKey(message.NewMessage("empty", nil), ""), redisdelay.BatchKeyMetadataKey},
			{"topic without batching", other, parcel("north", 1), redisdelay.BatchKeyMetadataKey},
			{"batch key and message key", topic, redisdelay.WithKey(parcel("north", 2), "order-1"), redisdelay.KeyMetadataKey},
			{"batch item with a delay", topic, delayed(parcel("north", 3)), delay.DelayedForKey},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := pub.Publish(tc.topic, message.NewMessage("fine", nil), tc.msg)
				var me *redisdelay.MessageError
				require.ErrorAs(t, err, &me)
				assert.Equal(t, tc.topic, me.Topic)
				assert.Equal(t, tc.msg.UUID, me.UUID)
				assert.Equal(t, tc.key, me.Key)
			})
		}
		for _, topic := range []string{topic, other} {
			assert.Zero(t, redisdelay.ScheduledForTest(context.Background(), b.client, topic, redisdelay.DefaultConsumerGroup), "topic %s: nothing stored", topic)
		}
	})
}

// TestBatchUUIDsAreUniqueAcrossPartitions: each partition counts its internal IDs, but the UUID
// of a batch, which Watermill's deduplicator and users' idempotency tables key on, is unique per
// topic, and the same on every attempt.
func TestBatchUUIDsAreUniqueAcrossPartitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		const partitions, batches = 3, 12
		pub := publisherWith(t, b, func(c *redisdelay.PublisherConfig) {
			c.Partitions = partitions
			c.Batching = map[string]redisdelay.BatchConfig{topic: {MaxItems: 1, MaxWait: time.Hour}}
		})
		ch := subscribe(t, newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = partitions }), topic)
		for i := range batches {
			require.NoError(t, pub.Publish(topic, parcel("area-"+strconv.Itoa(i), i)))
		}
		// The first delivery is nacked once: its second attempt keeps its UUID.
		acked, nacked := map[string]bool{}, ""
		for len(acked) < batches {
			msg := receive(t, ch, 5*time.Second)
			switch {
			case nacked == "":
				nacked = msg.UUID
				msg.Nack()
				continue
			case msg.UUID == nacked:
				assert.Equal(t, "2", msg.Metadata.Get(redisdelay.AttemptMetadataKey), "the nacked batch again")
			default:
				assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey), "batch UUID %s delivered for two batches", msg.UUID)
			}
			assert.False(t, acked[msg.UUID], "batch UUID %s delivered for two batches", msg.UUID)
			acked[msg.UUID] = true
			msg.Ack()
		}
		seen := acked
		assert.Len(t, seen, batches)
	})
}
