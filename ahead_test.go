package redisdelay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// TestAMessageClaimedAheadIsHandedOutAtItsDueTime: a subscription claims a message without a
// key shortly before its due time and holds it; the handler must never see it before its due
// time on the Redis clock (the Redis server runs on this host, so its clock is the local one).
// Delays of 3 to 30 ms, 1 ms apart, put most of the messages within a claim's reach before
// they are due.
func TestAMessageClaimedAheadIsHandedOutAtItsDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		msgs := subscribe(t, newSubscriber(t, b, nil), topic)
		const n = 28
		var batch []*message.Message
		for i := range n {
			msg := message.NewMessage(fmt.Sprintf("m%02d", i), []byte("x"))
			delay.Message(msg, delay.For(time.Duration(3+i)*time.Millisecond))
			batch = append(batch, msg)
		}
		require.NoError(t, pub.Publish(topic, batch...))
		for range n {
			msg := receive(t, msgs, 5*time.Second)
			at := time.Now()
			due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
			require.NoError(t, err)
			assert.False(t, at.Before(due), "message %s handed out %s before its due time", msg.UUID, due.Sub(at))
			msg.Ack()
		}
	})
}

// TestALostReplyOfAClaimAheadNeverHandsOutEarly: the replies of the first claims that lease
// messages are lost, with messages claimed ahead among them; the claims are answered again from
// their records. No message may reach the handler before its delay, counted from before its
// Publish call, has passed, nor before the due time of its delivery metadata (Redis clock, this
// host's), and none may use up an attempt. (The subscription retries a failed
// claim after its backoff, 50 ms at least, so the messages of an answer again are due by then;
// the due time that answer gives is checked in TestAClaimAheadTakesMessagesWithoutAKeyOnly.)
func TestALostReplyOfAClaimAheadNeverHandsOutEarly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var dropped atomic.Int64
		client := faultyClient(t, b, loseClaimReplies(3, &dropped))
		topic := newTopic()
		pub := newPublisher(t, b)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, MaxAttempts: 1}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := subscribe(t, sub, topic)
		const n = 12
		notBefore := map[string]time.Time{}
		for i := range n {
			d := 3*time.Millisecond + time.Duration(i)*50*time.Millisecond
			msg := message.NewMessage(fmt.Sprintf("m%02d", i), []byte("x"))
			delay.Message(msg, delay.For(d))
			notBefore[msg.UUID] = time.Now().Add(d)
			require.NoError(t, pub.Publish(topic, msg))
		}
		for range n {
			msg := receive(t, ch, 5*time.Second)
			at := time.Now()
			assert.False(t, at.Before(notBefore[msg.UUID]), "message %s handed out %s early", msg.UUID, notBefore[msg.UUID].Sub(at))
			due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
			require.NoError(t, err)
			assert.False(t, at.Before(due), "message %s handed out %s before its due time", msg.UUID, due.Sub(at))
			assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey), "a lost claim reply must not use up an attempt")
			msg.Ack()
		}
		assert.GreaterOrEqual(t, dropped.Load(), int64(1), "the hook must have dropped a claim reply")
	})
}

// TestAClaimSentDuringAHoldDoesNotKeepTheHeldMessagesWaiting: a subscription that holds
// messages claimed ahead sends its next claim before a hold, and that claim's round trip must
// not delay the held messages. Once a few messages have grown its claim size past one, messages
// due 4 to 13 ms after their publish are claimed ahead on the publish's wake-up; every claim
// after that first one is held up by the test until the first claim's messages have all
// reached the handler. They must all arrive, while a claim sent before the last of them was
// handed out waits (a claim that the hold waited for would keep them back until the test gives
// up); then the rest arrive.
func TestAClaimSentDuringAHoldDoesNotKeepTheHeldMessagesWaiting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var firstLeased, blockedAt atomic.Int64
		var armed atomic.Bool
		release := make(chan struct{})
		client := faultyClient(t, b, scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if !armed.Load() {
				return next(ctx, cmd)
			}
			if firstLeased.Load() > 0 {
				blockedAt.CompareAndSwap(0, time.Now().UnixNano())
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				return next(ctx, cmd)
			}
			err := next(ctx, cmd)
			// claim.lua's reply has 7 values, then 4 per leased message.
			if reply, _ := cmd.(*redis.Cmd).Val().([]any); err == nil && len(reply) > 7 {
				firstLeased.Store(int64(len(reply)-7) / 4)
			}
			return err
		}})
		topic := newTopic()
		pub := newPublisher(t, b)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := subscribe(t, sub, topic)
		for i := range 6 { // each batch handed out doubles the claim size, from 1
			require.NoError(t, pub.Publish(topic, message.NewMessage(fmt.Sprintf("w%d", i), nil)))
			receive(t, ch, 5*time.Second).Ack()
		}
		armed.Store(true)
		const n = 10
		var batch []*message.Message
		var want []string
		for i := range n {
			msg := message.NewMessage(fmt.Sprintf("m%d", i), []byte("x"))
			want = append(want, msg.UUID)
			delay.Message(msg, delay.For(time.Duration(4+i)*time.Millisecond))
			batch = append(batch, msg)
		}
		require.NoError(t, pub.Publish(topic, batch...))
		var got []string
		var lastHandedOut time.Time
		for int64(len(got)) < n && (firstLeased.Load() == 0 || int64(len(got)) < firstLeased.Load()) {
			msg := receive(t, ch, 2*time.Second)
			lastHandedOut = time.Now()
			got = append(got, msg.UUID)
			msg.Ack()
		}
		leased := firstLeased.Load()
		require.Positive(t, leased, "the first claim leased messages")
		require.Less(t, leased, int64(n), "the first claim reached past the last message: nothing to check")
		require.NotZero(t, blockedAt.Load(), "a claim was sent while the first claim's messages were handed out")
		assert.True(t, time.Unix(0, blockedAt.Load()).Before(lastHandedOut),
			"the next claim was sent before the last of the first claim's %d messages was handed out, and did not hold it up", leased)
		close(release)
		for len(got) < n {
			msg := receive(t, ch, 5*time.Second)
			got = append(got, msg.UUID)
			msg.Ack()
		}
		assert.ElementsMatch(t, want, got)
	})
}
