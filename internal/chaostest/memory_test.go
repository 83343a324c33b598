//go:build chaos

package chaostest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// Scenario 4. A Redis with maxmemory and noeviction fills up: Publish fails with ErrRedisFull
// and stores nothing of the refused batch, and a fresh subscriber of the registered group drains
// every acknowledged message, nacking and dead-lettering some while Redis is still full.
func TestFullRedisRefusesPublishAndKeepsDraining(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Extra: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}})
	logger := newLogger(t.Name())
	client := newClient(t, srv.Addr)
	topic, group := newTopic(), "chaos"
	deadLetterTopic := redisdelay.DefaultDeadLetterTopic(topic, group)

	// The group is registered by a subscriber that then goes away.
	first := newSubscriber(t, client, group, logger, nil)
	require.NoError(t, first.SubscribeInitialize(topic))
	require.NoError(t, first.Close())

	// Fill Redis: batches of 20 messages of 1 KiB until Publish fails, bounded in count and time.
	l := newLedger()
	pub := newPublisher(t, client, logger, nil)
	payload := []byte(strings.Repeat("x", 1024))
	publishBatch := func(n int) error {
		start := time.Now()
		msgs := make([]*message.Message, n)
		for j := range msgs {
			msgs[j] = newMessage(0, payload)
		}
		return l.publish(pub, topic, start, make([]time.Duration, n), msgs...)
	}
	var full error
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < 5000 && full == nil && time.Now().Before(deadline); i++ {
		full = publishBatch(20)
	}
	require.Error(t, full, "Publish never failed although Redis has maxmemory 8mb")
	used, limit := memory(t, srv.Addr)
	t.Logf("Publish failed after %d acknowledged messages, used_memory %d of maxmemory %d: %v", l.summarize().acknowledged, used, limit, full)
	assert.ErrorIs(t, full, redisdelay.ErrRedisFull)
	assert.NotErrorIs(t, full, redisdelay.ErrOutcomeUnknown, "Redis refused the script: the outcome is known")
	assert.Contains(t, full.Error(), "OOM", "the error carries Redis's own reply")
	assert.Contains(t, full.Error(), topic, "the error names the topic")

	// A fresh subscriber of the group, giving each message one attempt: the first messages,
	// nacked, become dead letters at once.
	const nacked = 5
	sub := newSubscriber(t, client, group, logger, func(c *redisdelay.SubscriberConfig) {
		c.MaxAttempts = 1
		c.LeaseTimeout = 10 * time.Second
		c.ClaimBatchSize = 10
	})
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	nackedUUIDs := map[string]bool{}
	for range nacked {
		msg := receive(t, ch, 10*time.Second)
		l.deliver(msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now())
		nackedUUIDs[msg.UUID] = true
		msg.Nack()
	}
	letters := newSubscriber(t, client, redisdelay.DefaultConsumerGroup, logger, nil)
	lettersCh, err := letters.Subscribe(context.Background(), deadLetterTopic)
	require.NoError(t, err)
	for range nacked {
		letter := receive(t, lettersCh, 10*time.Second)
		assert.True(t, nackedUUIDs[letter.UUID], "dead letter %s was not nacked", letter.UUID)
		assert.Equal(t, redisdelay.DeadLetterReasonNacked, letter.Metadata.Get(redisdelay.DeadLetterReasonMetadataKey))
		assert.Equal(t, topic, letter.Metadata.Get(redisdelay.DeadLetterTopicMetadataKey))
		letter.Ack()
	}
	// Redis was full all along: it still refuses a batch twice the size of the one it refused.
	// (Should this precondition fail, the messages it stored are accounted for and drained.)
	used, limit = memory(t, srv.Addr)
	stillFull := publishBatch(40)
	assert.ErrorIs(t, stillFull, redisdelay.ErrRedisFull, "precondition: Redis is still full after the dead-lettering (used_memory %d of %d)", used, limit)

	// The rest is drained and acked.
	go l.consume(ch)
	missing := l.waitAllStoredDelivered(drainTimeout)

	// The acks freed memory: Publish works again, once they are confirmed (each try bounded).
	var again error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if again = publishBatch(1); again == nil || time.Now().After(deadline) {
			break
		}
	}
	missingAfter := l.waitAllStoredDelivered(10 * time.Second)
	require.NoError(t, sub.Close())
	require.NoError(t, letters.Close())

	l.report(t, "redis-full-noeviction")
	assert.Zero(t, missing, "acknowledged messages still undelivered %s after Redis filled up", drainTimeout)
	assert.NoError(t, again, "Publish still fails after the drain freed memory")
	assert.Zero(t, missingAfter, "a message published after the drain was not delivered")
}

// memory returns used_memory and maxmemory from INFO memory.
func memory(t *testing.T, addr string) (used, limit int64) {
	return infoField(t, addr, "memory", "used_memory"), infoField(t, addr, "memory", "maxmemory")
}

// Scenario 5. On a Redis whose maxmemory-policy evicts keys, Publish, Subscribe and
// SubscribeInitialize refuse with ErrEvictingRedis and store nothing, unless AllowEvictingRedis
// is set.
func TestEvictingRedisIsRefusedUnlessAllowed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	client := newClient(t, srv.Addr)
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "allkeys-random"} {
		t.Run(policy, func(t *testing.T) {
			require.NoError(t, client.ConfigSet(context.Background(), "maxmemory-policy", policy).Err())
			logger := newLogger(t.Name())
			topic, group := newTopic(), "chaos"
			l := newLedger()
			allowedSub := newSubscriber(t, client, group, logger, func(c *redisdelay.SubscriberConfig) { c.AllowEvictingRedis = true })
			require.NoError(t, allowedSub.SubscribeInitialize(topic), "SubscribeInitialize with AllowEvictingRedis")

			// Refused: nothing is stored, no subscription runs.
			refused := newMessage(0, nil)
			err := l.publish(newPublisher(t, client, logger, nil), topic, time.Now(), []time.Duration{0}, refused)
			assert.ErrorIs(t, err, redisdelay.ErrEvictingRedis, "Publish")
			sub := newSubscriber(t, client, group, logger, nil)
			assert.ErrorIs(t, sub.SubscribeInitialize(topic), redisdelay.ErrEvictingRedis, "SubscribeInitialize")
			ch, err := sub.Subscribe(context.Background(), topic)
			assert.ErrorIs(t, err, redisdelay.ErrEvictingRedis, "Subscribe")
			assert.Nil(t, ch, "Subscribe returned a channel with its error")
			require.NoError(t, sub.Close())

			// Allowed: the calls work, and the refused message does not show up ahead of the
			// allowed one (same topic and group, both due at once, so they would come in publish
			// order).
			allowedCh, err := allowedSub.Subscribe(context.Background(), topic)
			require.NoError(t, err, "Subscribe with AllowEvictingRedis")
			allowedPub := newPublisher(t, client, logger, func(c *redisdelay.PublisherConfig) { c.AllowEvictingRedis = true })
			allowed := newMessage(0, nil)
			require.NoError(t, l.publish(allowedPub, topic, time.Now(), []time.Duration{0}, allowed), "Publish with AllowEvictingRedis")
			var first string
			for i := 0; ; i++ {
				require.Less(t, i, maxReceives, "the allowed message did not come within %d messages", maxReceives)
				msg := receive(t, allowedCh, 10*time.Second)
				l.deliver(msg.UUID, msg.Metadata.Get(redisdelay.AttemptMetadataKey), time.Now())
				msg.Ack()
				if first == "" {
					first = msg.UUID
				}
				if msg.UUID == allowed.UUID {
					break
				}
			}
			require.NoError(t, allowedSub.Close())

			l.report(t, "evicting-redis/"+policy)
			assert.Equal(t, allowed.UUID, first, "the first message delivered is not the allowed one")
		})
	}
}
