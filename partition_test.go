package redisdelay_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestPartitionedTopicSpreadsMessagesAndKeepsOrderPerKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const partitions, orders, perOrder = 4, 12, 25
		topic := newTopic()
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, Partitions: partitions, PartitionKey: "order_id"}, nil)
		require.NoError(t, err)
		in := newInspector(t, b, partitions)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = partitions })
		require.NoError(t, sub.SubscribeInitialize(topic))

		for seq := 0; seq < perOrder; seq++ {
			for o := 0; o < orders; o++ {
				msg := message.NewMessage(fmt.Sprintf("o%d-%03d", o, seq), nil)
				msg.Metadata.Set("order_id", strconv.Itoa(o))
				msg.Metadata.Set("seq", strconv.Itoa(seq))
				require.NoError(t, pub.Publish(topic, msg))
			}
		}
		// Unkeyed messages go round-robin, a whole Publish call to one partition.
		for i := 0; i < 2*partitions; i++ {
			require.NoError(t, pub.Publish(topic, message.NewMessage(fmt.Sprintf("free-%d-a", i), nil), message.NewMessage(fmt.Sprintf("free-%d-b", i), nil)))
		}
		total := orders*perOrder + 4*partitions

		ctx := context.Background()
		for n := 0; n < partitions; n++ {
			due, _ := redisdelay.GroupKeysForTest("", redisdelay.PartitionNameForTest(topic, n), redisdelay.DefaultConsumerGroup)
			assert.Positive(t, b.client.ZCard(ctx, due).Val(), "partition %d got no messages", n)
		}

		ch, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		var inFlight atomic.Int32
		lastSeq := map[string]int{}
		seen := map[string]bool{}
		for len(seen) < total {
			msg := receive(t, ch, 5*time.Second)
			require.EqualValues(t, 1, inFlight.Add(1), "two messages in flight at once")
			require.False(t, seen[msg.UUID], "%s delivered twice", msg.UUID)
			seen[msg.UUID] = true
			if order := msg.Metadata.Get("order_id"); order != "" {
				seq, _ := strconv.Atoi(msg.Metadata.Get("seq"))
				if last, ok := lastSeq[order]; ok {
					require.Greater(t, seq, last, "order %s out of order", order)
				}
				lastSeq[order] = seq
			}
			inFlight.Add(-1)
			msg.Ack()
		}
		waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Len(t, lastSeq, orders)
	})
}

func TestPartitionsHaveTheirOwnHashSlotsAndDeadLettersFollow(t *testing.T) {
	slots := map[int]bool{}
	for n := 0; n < 6; n++ {
		part := redisdelay.PartitionNameForTest("orders", n)
		due, lease := redisdelay.GroupKeysForTest("", part, "billing")
		require.Equal(t, keySlot(due), keySlot(lease))
		slots[keySlot(due)] = true

		dead := redisdelay.PartitionNameForTest(redisdelay.DefaultDeadLetterTopic("orders", "billing"), n)
		deadDue, _ := redisdelay.GroupKeysForTest("", dead, "ops")
		assert.Equal(t, keySlot(due), keySlot(deadDue), "the dead letters of partition %d share its slot", n)
	}
	assert.Len(t, slots, 6, "each partition has a slot of its own")

	for _, name := range []string{"orders#1", "orders#12", "orders#1.dead-letter.billing"} {
		assert.ErrorIs(t, redisdelay.ValidateName("topic", name), redisdelay.ErrInvalidName, name)
	}
	for _, name := range []string{"#general", "orders#", "orders#1a", "a#b"} {
		assert.NoError(t, redisdelay.ValidateName("topic", name), name)
	}
}

func TestNoPartitionIsStarved(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, Partitions: 2, PartitionKey: "k"}, nil)
		require.NoError(t, err)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.Partitions = 2 })
		require.NoError(t, sub.SubscribeInitialize(topic))

		// A key for each partition, by the documented FNV-1a rule.
		keys := map[uint32]string{}
		for i := 0; len(keys) < 2; i++ {
			h := fnv.New32a()
			_, _ = h.Write([]byte(strconv.Itoa(i)))
			if _, ok := keys[h.Sum32()%2]; !ok {
				keys[h.Sum32()%2] = strconv.Itoa(i)
			}
		}
		// Both partitions' consumers are running (their wake channels confirmed) before the
		// flood, so the test measures turn-taking, not which one started first.
		ch := subscribe(t, sub, topic)
		for _, k := range keys {
			m := message.NewMessage("warm-"+k, nil)
			m.Metadata.Set("k", k)
			require.NoError(t, pub.Publish(topic, m))
		}
		for range keys {
			warm := receive(t, ch, 5*time.Second)
			assert.True(t, strings.HasPrefix(warm.UUID, "warm-"))
			warm.Ack()
		}
		var flood []*message.Message
		for i := 0; i < 500; i++ {
			m := message.NewMessage(fmt.Sprintf("busy-%03d", i), nil)
			m.Metadata.Set("k", keys[0])
			flood = append(flood, m)
		}
		require.NoError(t, pub.Publish(topic, flood...))
		var quietOnes []*message.Message
		for i := 0; i < 5; i++ {
			m := message.NewMessage(fmt.Sprintf("quiet-%d", i), nil)
			m.Metadata.Set("k", keys[1])
			quietOnes = append(quietOnes, m)
		}
		require.NoError(t, pub.Publish(topic, quietOnes...))

		quiet := 0
		for i := 1; i <= 505; i++ {
			msg := receive(t, ch, 5*time.Second)
			if strings.HasPrefix(msg.UUID, "quiet-") {
				quiet++
				assert.LessOrEqual(t, i, 60, "%s waited behind %d messages of the busy partition", msg.UUID, i-quiet)
			}
			// A millisecond of handler work, so that turn-taking decides the order rather than
			// which partition's Redis round trip happens to be faster.
			time.Sleep(time.Millisecond)
			msg.Ack()
		}
		assert.Equal(t, 5, quiet)
	})
}

// TestAMessageWaitingForItsTurnKeepsItsLease: a subscription claims per partition, and a
// message claimed for one partition may wait for its Subscribe call's turn behind another
// partition's slow handler. Its lease is extended while it waits, so the group's other
// subscription never gets it too: no duplicate with 1, 2 or 3 partitions, even with a lease
// shorter than the handler.
func TestAMessageWaitingForItsTurnKeepsItsLease(t *testing.T) {
	for _, partitions := range []int{1, 2, 3} {
		t.Run(strconv.Itoa(partitions)+"-partitions", func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				const n, lease, slow = 30, 300 * time.Millisecond, time.Second
				topic := newTopic()
				pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: b.client, Partitions: partitions}, nil)
				require.NoError(t, err)
				edit := func(c *redisdelay.SubscriberConfig) { c.Partitions, c.LeaseTimeout = partitions, lease }
				type delivery struct{ uuid, attempt string }
				deliveries := make(chan delivery, 4*n)
				s1 := subscribe(t, newSubscriber(t, b, edit), topic)
				s2 := subscribe(t, newSubscriber(t, b, edit), topic)
				var first atomic.Bool
				consume := func(ch <-chan *message.Message, holdFirst bool) {
					for msg := range ch {
						if holdFirst && first.CompareAndSwap(false, true) {
							time.Sleep(slow) // the slow handler of the test's subject
						}
						deliveries <- delivery{msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey)}
						msg.Ack()
					}
				}
				go consume(s1, true)
				go consume(s2, false)
				for i := range n {
					require.NoError(t, pub.Publish(topic, message.NewMessage(fmt.Sprintf("m%02d", i), nil)))
				}
				seen := map[string]int{}
				timeout := time.After(15 * time.Second)
				for len(seen) < n {
					select {
					case d := <-deliveries:
						seen[d.uuid]++
					case <-timeout:
						t.Fatalf("%d of %d messages delivered", len(seen), n)
					}
				}
				// The slow handler's message is among them; anything still held is handed out
				// within a lease, and would be a duplicate.
				quiet := time.After(2 * lease)
				for done := false; !done; {
					select {
					case d := <-deliveries:
						seen[d.uuid]++
					case <-quiet:
						done = true
					}
				}
				duplicates := 0
				for uuid, count := range seen {
					if count > 1 {
						duplicates += count - 1
						t.Errorf("%s delivered %d times", uuid, count)
					}
				}
				t.Logf("%s, %d partitions: %d duplicates", b.name, partitions, duplicates)
			})
		})
	}
}
