package redisdelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
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

// topicSnapshot returns every key of topic (and of its dead-letter topics, which share its hash
// tag) with its type, whether it expires, and its contents, so that a test can check that an
// operation wrote nothing.
func topicSnapshot(t *testing.T, b backend, topic string) map[string]string {
	t.Helper()
	ctx := context.Background()
	all, err := scanKeys(ctx, b, "*")
	require.NoError(t, err)
	var keys []string
	for _, k := range all {
		if strings.Contains(k, "{"+topic+"}") {
			keys = append(keys, k)
		}
	}
	out := map[string]string{}
	for _, k := range keys {
		typ := b.client.Type(ctx, k).Val()
		var value any
		switch typ {
		case "string":
			value = b.client.Get(ctx, k).Val()
		case "hash":
			value = b.client.HGetAll(ctx, k).Val()
		case "zset":
			value = b.client.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "set":
			members := b.client.SMembers(ctx, k).Val()
			sort.Strings(members)
			value = members
		}
		pttl, err := b.client.Do(ctx, "PTTL", k).Int64()
		require.NoError(t, err)
		out[k] = fmt.Sprintf("%s expires=%t %v", typ, pttl >= 0, value)
	}
	return out
}

// publishDeadLetter publishes msg straight to the dead-letter topic of group on topic, where no
// group is subscribed: it waits in that topic's parked set, as a dead letter does.
func publishDeadLetter(t *testing.T, pub *redisdelay.Publisher, topic, group string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, pub.Publish(redisdelay.DefaultDeadLetterTopic(topic, group), msgs...))
}

func listDead(t *testing.T, in *redisdelay.Inspector, topic, group string) []redisdelay.MessageInfo {
	t.Helper()
	page, err := in.List(context.Background(), topic, group, redisdelay.ListOptions{State: redisdelay.StateDeadLettered, Limit: 1000})
	require.NoError(t, err)
	return page.Messages
}

func TestRequeueOfAKeyedDeadLetterWritesNoForeignKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, c := range []struct {
			name, kind string
			retention  time.Duration
		}{{"string", "string", 0}, {"hash", "hash", 0}, {"hash and a key history", "hash", time.Hour}} {
			t.Run(c.name, func(t *testing.T) {
				kind := c.kind
				topic := newTopic()
				group := redisdelay.DefaultConsumerGroup
				pub := publisherWith(t, b, func(pc *redisdelay.PublisherConfig) { pc.KeyRetention = c.retention })
				in := newInspector(t, b, 1)
				sub := newSubscriber(t, b, nil)
				require.NoError(t, sub.SubscribeInitialize(topic))

				// A key named as the message key: on a Cluster it lives wherever it hashes.
				key := "order-" + watermill.NewShortUUID()
				if kind == "string" {
					require.NoError(t, b.client.Set(ctx, key, "not the queue's", 0).Err())
				} else {
					require.NoError(t, b.client.HSet(ctx, key, "", "1000", "other", "field").Err())
				}
				foreign := func() (string, any, int64) {
					typ := b.client.Type(ctx, key).Val()
					var value any = b.client.Get(ctx, key).Val()
					if kind == "hash" {
						value = b.client.HGetAll(ctx, key).Val()
					}
					pttl, err := b.client.Do(ctx, "PTTL", key).Int64()
					require.NoError(t, err)
					return typ, value, pttl
				}
				typ, value, _ := foreign()

				publishDeadLetter(t, pub, topic, group, redisdelay.WithKey(message.NewMessage("poison", []byte("keyed dead letter")), key))
				dead := listDead(t, in, topic, group)
				require.Len(t, dead, 1)
				require.Equal(t, key, dead[0].Key)

				n, err := in.Requeue(ctx, topic, group)
				require.NoError(t, err)
				assert.Equal(t, int64(1), n)
				msg := receive(t, subscribe(t, sub, topic), 5*time.Second)
				assert.Equal(t, "poison", msg.UUID)
				assert.Equal(t, "keyed dead letter", string(msg.Payload))
				msg.Ack()
				assert.Empty(t, listDead(t, in, topic, group))

				gotType, gotValue, pttl := foreign()
				assert.Equal(t, typ, gotType, "the foreign key keeps its type")
				assert.Equal(t, value, gotValue, "the foreign key keeps its value")
				assert.Equal(t, int64(-1), pttl, "the foreign key gets no TTL")

				// The key is free again on the dead-letter topic, or its history there expires
				// after the retention.
				var history []string
				for k, v := range topicSnapshot(t, b, topic) {
					if strings.HasSuffix(k, ":history:"+key) {
						history = append(history, k+" "+v)
					}
				}
				publishDeadLetter(t, pub, topic, group, redisdelay.WithKey(message.NewMessage("again", nil), key))
				dead = listDead(t, in, topic, group)
				if c.retention == 0 {
					assert.Empty(t, history)
					require.Len(t, dead, 1)
					assert.Equal(t, "again", dead[0].UUID)
					return
				}
				require.Len(t, history, 1)
				assert.Contains(t, history[0], ".dead-letter."+group+":history:", "the dead-letter topic's own history key")
				assert.Contains(t, history[0], "expires=true")
				assert.Empty(t, dead, "a duplicate while the key's history is kept")
			})
		}
	})
}

func TestRequeueAndPurgeRefuseARemovedGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		for _, g := range []string{"stays", "goes"} {
			require.NoError(t, newSubscriber(t, b, inGroup(g)).SubscribeInitialize(topic))
		}
		publishDelayed(t, pub, topic, "later", 3, time.Hour)
		publishDeadLetter(t, pub, topic, "goes", message.NewMessage("dead0", nil), redisdelay.WithKey(message.NewMessage("dead1", nil), "k-"+watermill.NewShortUUID()))
		require.Len(t, listDead(t, in, topic, "goes"), 2)
		dropped, err := in.RemoveGroup(ctx, topic, "goes")
		require.NoError(t, err)
		require.Equal(t, int64(3), dropped)
		// A write that raced the removal left a member of the group that stays in the removed
		// group's due set: a purge of the removed group must not drop the message under it.
		staysDue, _ := redisdelay.GroupKeysForTest("", topic, "stays")
		goesDue, _ := redisdelay.GroupKeysForTest("", topic, "goes")
		held := b.client.ZRangeWithScores(ctx, staysDue, 0, 0).Val()
		require.Len(t, held, 1)
		require.NoError(t, b.client.ZAdd(ctx, goesDue, held[0]).Err())
		before := topicSnapshot(t, b, topic)
		require.Contains(t, before, goesDue)

		_, err = in.Requeue(ctx, topic, "goes")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		_, err = in.Purge(ctx, topic, "goes", redisdelay.StateScheduled)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)

		// The scripts check the group themselves, for a removal after the Inspector's check.
		n, err := redisdelay.RequeueUncheckedForTest(ctx, in, topic, "goes")
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		assert.ErrorContains(t, err, "goes")
		assert.ErrorContains(t, err, topic)
		assert.Zero(t, n)
		n, err = redisdelay.PurgeUncheckedForTest(ctx, in, topic, "goes", redisdelay.StateScheduled)
		assert.ErrorIs(t, err, redisdelay.ErrNotFound)
		assert.ErrorContains(t, err, "goes")
		assert.ErrorContains(t, err, topic)
		assert.Zero(t, n)

		assert.Equal(t, before, topicSnapshot(t, b, topic), "nothing was written")
		assert.Equal(t, int64(3), statsOf(t, in, topic, "stays").Scheduled)
	})
}

func TestFailedRequeueLeavesTheDeadLettersListed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		group := redisdelay.DefaultConsumerGroup
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, nil)
		require.NoError(t, sub.SubscribeInitialize(topic))
		publishDeadLetter(t, pub, topic, group, message.NewMessage("dead0", nil), message.NewMessage("dead1", nil),
			redisdelay.WithKey(message.NewMessage("dead2", nil), "k-"+watermill.NewShortUUID()))
		require.Len(t, listDead(t, in, topic, group), 3)

		// The source topic's messages hash, which the requeue writes, is in the way.
		messages := redisdelay.MessagesKeyForTest("", topic)
		require.Zero(t, b.client.Exists(ctx, messages).Val())
		require.NoError(t, b.client.Set(ctx, messages, "in the way", 0).Err())
		before := topicSnapshot(t, b, topic)
		_, err := in.Requeue(ctx, topic, group)
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.Len(t, listDead(t, in, topic, group), 3, "the dead letters stay where they were")
		assert.Equal(t, before, topicSnapshot(t, b, topic), "nothing was written")

		require.NoError(t, b.client.Del(ctx, messages).Err())
		n, err := in.Requeue(ctx, topic, group)
		require.NoError(t, err)
		assert.Equal(t, int64(3), n)
		ch := subscribe(t, sub, topic)
		seen := map[string]bool{}
		for range 3 {
			msg := receive(t, ch, 5*time.Second)
			seen[msg.UUID] = true
			msg.Ack()
		}
		assert.Equal(t, map[string]bool{"dead0": true, "dead1": true, "dead2": true}, seen)
	})
}

func TestPurgedBatchIsClosedSoTheNextItemOpensANewOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		topic := newTopic()
		pub := batchingPublisher(t, b, topic, redisdelay.BatchConfig{MaxItems: 10, MaxWait: time.Hour})
		in := newInspector(t, b, 1)
		for _, g := range []string{"a", "b"} {
			require.NoError(t, newSubscriber(t, b, inGroup(g)).SubscribeInitialize(topic))
		}
		require.NoError(t, pub.Publish(topic, parcel("north", 1)))
		n, err := in.Purge(ctx, topic, "a", redisdelay.StateScheduled)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		require.NoError(t, pub.Publish(topic, parcel("north", 2)))
		assert.Equal(t, int64(1), statsOf(t, in, topic, "a").Scheduled, "the next item opened a new batch, which group a holds")
		assert.Equal(t, int64(2), statsOf(t, in, topic, "b").Scheduled, "group b keeps the purged batch and holds the new one")
	})
}

func TestRequeueBringsDeadLettersBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 1 })
		ch := subscribe(t, sub, topic)
		publishDelayed(t, pub, topic, "m", 10, 0)
		for range 10 {
			receive(t, ch, 5*time.Second).Nack()
		}
		var dead redisdelay.ListPage
		require.Eventually(t, func() bool {
			var err error
			dead, err = in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDeadLettered})
			require.NoError(t, err)
			return len(dead.Messages) == 10
		}, 5*time.Second, 10*time.Millisecond)
		assert.Equal(t, redisdelay.DeadLetterReasonNacked, dead.Messages[0].Metadata[redisdelay.DeadLetterReasonMetadataKey])

		n, err := in.Requeue(context.Background(), topic, redisdelay.DefaultConsumerGroup, dead.Messages[0].Ref)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		msg := receive(t, ch, 5*time.Second)
		assert.Equal(t, dead.Messages[0].UUID, msg.UUID)
		assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey))
		msg.Ack()

		n, err = in.Requeue(context.Background(), topic, redisdelay.DefaultConsumerGroup)
		require.NoError(t, err)
		assert.Equal(t, int64(9), n)
		seen := map[string]bool{}
		for range 9 {
			msg := receive(t, ch, 5*time.Second)
			seen[msg.UUID] = true
			msg.Ack()
		}
		assert.Len(t, seen, 9)
		assert.NotContains(t, seen, dead.Messages[0].UUID)
		assert.Zero(t, statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).DeadLetters)
	})
}

func TestPurgeDropsOneStateOfOneGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		in := newInspector(t, b, 1)
		for _, g := range []string{"a", "b"} {
			require.NoError(t, newSubscriber(t, b, inGroup(g)).SubscribeInitialize(topic))
		}
		publishDelayed(t, pub, topic, "due", 3, 0)
		publishDelayed(t, pub, topic, "later", 5, time.Hour)
		n, err := in.Purge(context.Background(), topic, "a", redisdelay.StateDue)
		require.NoError(t, err)
		assert.Equal(t, int64(3), n)
		a, bb := statsOf(t, in, topic, "a"), statsOf(t, in, topic, "b")
		assert.Equal(t, [2]int64{0, 5}, [2]int64{a.Due, a.Scheduled})
		assert.Equal(t, [2]int64{3, 5}, [2]int64{bb.Due, bb.Scheduled}, "the other group keeps its messages")
		ch := subscribe(t, newSubscriber(t, b, inGroup("b")), topic)
		for range 3 {
			receive(t, ch, 5*time.Second).Ack()
		}
	})
}

// TestPurgeOfScheduledTakesTheBucketThatMovesNext: a Purge of StateScheduled that runs just
// before a compact-tier bucket's move time drops its message. purge.lua's bound "(now" must be
// the exact Redis time in µs: Lua's own number-to-text rounds it to 100 µs, and a purge within
// 50 µs before the move time skipped the bucket (9, 5 and 3 misses in 400 rounds). Each round
// publishes one message into a bucket that moves 2-12 ms later and purges at a random moment of
// the last 600 µs before the move.
func TestPurgeOfScheduledTakesTheBucketThatMovesNext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const horizon, rounds = 10 * time.Millisecond, 400
		topic := newTopic()
		pub := compactPublisher(t, b, horizon)
		in := newInspector(t, b, 1)
		require.NoError(t, newSubscriber(t, b, nil).SubscribeInitialize(topic))
		missed, late := 0, 0
		for r := range rounds {
			now, err := b.client.Time(ctx).Result()
			require.NoError(t, err)
			start := now.Add(horizon + 2*time.Millisecond).Truncate(horizon).Add(horizon) // it moves a horizon before
			due := start.Add(horizon - time.Microsecond)
			require.NoError(t, pub.Publish(topic, dueAtExactly(r, due)))
			purgeAt := start.Add(-horizon - time.Duration(rand.IntN(600))*time.Microsecond)
			for time.Now().Before(purgeAt) {
				// Spin: a sleep's wake-up is too coarse to aim at a 50 µs window.
			}
			n, err := in.Purge(ctx, topic, redisdelay.DefaultConsumerGroup, redisdelay.StateScheduled)
			require.NoError(t, err)
			after, err := b.client.Time(ctx).Result()
			require.NoError(t, err)
			switch {
			case !after.Before(due):
				late++ // the message may have fallen due before the purge: not a scheduled one
			case n == 0:
				missed++
			}
		}
		assert.Zero(t, missed, "purges of %d rounds that left the message of the bucket moving next", rounds-late)
		assert.Less(t, late, rounds/2, "rounds whose purge ran after the message's due time")
		st := statsOf(t, in, topic, redisdelay.DefaultConsumerGroup)
		assert.Zero(t, st.Scheduled+st.Compact, "scheduled after the purges: %+v", st)
	})
}

// dueAtExactly returns message i due at the instant at, to the microsecond (delay.Until keeps
// whole seconds only).
func dueAtExactly(i int, at time.Time) *message.Message {
	msg := message.NewMessage(strconv.Itoa(i), []byte("payload "+strconv.Itoa(i)))
	msg.Metadata.Set(delay.DelayedUntilKey, at.UTC().Format(time.RFC3339Nano))
	return msg
}
