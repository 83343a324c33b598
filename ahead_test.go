package redisdelay_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
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

// stalledClaims is a fault for the claims a subscription sends while it holds messages. Once
// armed, it lets the first claim that leases messages through (leased counts them) and holds up
// every claim after it until it is disarmed; blockedAt is when it first held one up. A
// held-up claim runs in Redis first when runFirst, and its reply is then lost (io.EOF) if its
// context ends meanwhile; else it runs only once released, and not at all if its context ends.
type stalledClaims struct {
	runFirst          bool
	leased, blockedAt atomic.Int64
	mu                sync.Mutex
	release           chan struct{} // nil while disarmed
}

// arm starts holding up claims afresh.
func (f *stalledClaims) arm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leased.Store(0)
	f.blockedAt.Store(0)
	f.release = make(chan struct{})
}

// disarm lets the held-up claims go on, and the next ones through.
func (f *stalledClaims) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.release)
	f.release = nil
}

func (f *stalledClaims) fault() scriptFault {
	return scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		f.mu.Lock()
		release := f.release
		f.mu.Unlock()
		if release == nil {
			return next(ctx, cmd)
		}
		if f.leased.Load() == 0 {
			err := next(ctx, cmd)
			if n := leasedBy(cmd); err == nil && n > 0 {
				f.leased.Store(int64(n))
			}
			return err
		}
		f.blockedAt.CompareAndSwap(0, time.Now().UnixNano())
		var err error
		if f.runFirst {
			err = next(ctx, cmd)
		}
		select {
		case <-release:
		case <-ctx.Done():
			if f.runFirst {
				cmd.SetErr(io.EOF)
				return io.EOF
			}
			return ctx.Err()
		}
		if f.runFirst {
			return err
		}
		return next(ctx, cmd)
	}}
}

// heldBatch returns n messages due 4 to 3+n ms after their publish, and their UUIDs.
func heldBatch(n int) ([]*message.Message, []string) {
	var batch []*message.Message
	var uuids []string
	for i := range n {
		msg := message.NewMessage(fmt.Sprintf("m%d", i), []byte("x"))
		delay.Message(msg, delay.For(time.Duration(4+i)*time.Millisecond))
		batch, uuids = append(batch, msg), append(uuids, msg.UUID)
	}
	return batch, uuids
}

// growClaimSize has sub's subscription ch hand out a few messages published one at a time:
// each batch handed out doubles its claim size, from 1, so that its next claims take several
// messages.
func growClaimSize(t *testing.T, pub *redisdelay.Publisher, topic string, ch <-chan *message.Message) {
	t.Helper()
	for i := range 6 {
		require.NoError(t, pub.Publish(topic, message.NewMessage(fmt.Sprintf("w%d", i), nil)))
		receive(t, ch, 5*time.Second).Ack()
	}
}

// receiveFirstClaim receives and acks what the first claim since f was armed leased (n at
// most), and returns their UUIDs, when the last of them arrived, and whether a claim after it
// had anything left to take: a first claim made late (a slow wake-up) may reach all n.
func receiveFirstClaim(t *testing.T, ch <-chan *message.Message, f *stalledClaims, n int) ([]string, time.Time, bool) {
	t.Helper()
	var got []string
	var last time.Time
	for len(got) < n && (f.leased.Load() == 0 || int64(len(got)) < f.leased.Load()) {
		msg := receive(t, ch, 2*time.Second)
		last = time.Now()
		got = append(got, msg.UUID)
		msg.Ack()
	}
	require.Positive(t, f.leased.Load(), "the first claim leased messages")
	return got, last, f.leased.Load() < int64(n)
}

// TestAClaimSentDuringAHoldDoesNotKeepTheHeldMessagesWaiting: a subscription that holds
// messages claimed ahead sends its next claim before a hold, and that claim's round trip must
// not delay the held messages. Once a few messages have grown its claim size past one, messages
// due 4 to 23 ms after their publish are claimed ahead on the publish's wake-up; every claim
// after that first one is held up by the test until the first claim's messages have all
// reached the handler. They must all arrive (a claim that a hold waited for would keep them back
// until the test gives up), then the rest. Whether a claim goes out during a hold depends on
// the timing (the next message must still be held 2.5 ms after the first claim, and the first
// claim must not reach them all), so the test
// tries up to ten batches and requires that in one of them a claim was sent before the last of
// the first claim's messages was handed out.
func TestAClaimSentDuringAHoldDoesNotKeepTheHeldMessagesWaiting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := &stalledClaims{}
		client := faultyClient(t, b, f.fault())
		topic := newTopic()
		pub := newPublisher(t, b)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client}, errorLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := subscribe(t, sub, topic)
		growClaimSize(t, pub, topic, ch)
		const n = 20
		during := false
		for try := 0; try < 10 && !during; try++ {
			f.arm()
			batch, want := heldBatch(n)
			require.NoError(t, pub.Publish(topic, batch...))
			got, lastHandedOut, left := receiveFirstClaim(t, ch, f, n)
			during = left && f.blockedAt.Load() != 0 && time.Unix(0, f.blockedAt.Load()).Before(lastHandedOut)
			f.disarm()
			for len(got) < n {
				msg := receive(t, ch, 5*time.Second)
				got = append(got, msg.UUID)
				msg.Ack()
			}
			assert.ElementsMatch(t, want, got)
		}
		assert.True(t, during, "in none of 10 batches was a claim sent before the last of the first claim's messages was handed out")
	})
}

// TestAClaimUnderWayWhenASubscriptionStopsIsReleased: the Subscriber closes while the claim
// its subscription sent during a hold is held up. Either that claim ran in Redis and its reply
// is lost (runFirst), or it never ran, and the acks it carried were never sent. Close must
// release what the claim leased (found by its token) and confirm those acks, so that another
// Subscriber of the group receives every other message at once, at attempt 1, and nothing is
// left in flight (the lease is a minute). As in the test above, the claim goes out during a
// hold only with the right timing: each case tries up to ten times, with a new Subscriber,
// and requires that once.
func TestAClaimUnderWayWhenASubscriptionStopsIsReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		in := newInspector(t, b, 1)
		for _, runFirst := range []bool{true, false} {
			during := false
			for try := 0; try < 10 && !during; try++ {
				during = stopWithAClaimUnderWay(t, b, in, runFirst)
			}
			assert.True(t, during, "runFirst %v: in none of 10 tries was a claim sent before the last of the first claim's messages was handed out", runFirst)
		}
	})
}

// stopWithAClaimUnderWay runs one try of TestAClaimUnderWayWhenASubscriptionStopsIsReleased and
// reports whether the claim held up was sent during a hold.
func stopWithAClaimUnderWay(t *testing.T, b backend, in *redisdelay.Inspector, runFirst bool) bool {
	t.Helper()
	f := &stalledClaims{runFirst: runFirst}
	client := faultyClient(t, b, f.fault())
	topic := newTopic()
	pub := newPublisher(t, b)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, LeaseTimeout: time.Minute}, errorLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() }) // before its client's, if the try fails before its Close
	ch := subscribe(t, sub, topic)
	growClaimSize(t, pub, topic, ch)
	f.arm()
	defer f.disarm()
	const n = 20
	batch, want := heldBatch(n)
	require.NoError(t, pub.Publish(topic, batch...))
	got, lastHandedOut, left := receiveFirstClaim(t, ch, f, n)
	during := false
	if left {
		require.Eventually(t, func() bool { return f.blockedAt.Load() != 0 }, 5*time.Second, time.Millisecond,
			"the next claim is held up")
		during = time.Unix(0, f.blockedAt.Load()).Before(lastHandedOut)
	}
	require.NoError(t, sub.Close())

	again := subscribe(t, newSubscriber(t, b, nil), topic)
	for len(got) < n {
		msg := receive(t, again, 5*time.Second)
		assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptMetadataKey), "a released claim uses up no attempt")
		got = append(got, msg.UUID)
		msg.Ack()
	}
	assert.ElementsMatch(t, want, got)
	waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
	return during
}

// TestAMessageDueBeforeAHeldOneIsNotKeptWaitingByTheHold: a subscription holds a message it
// claimed ahead of its due time; a message published meanwhile without a delay, due at once,
// must be handed out first, before the held one is due, not after the hold. The subscription
// claims 100 ms ahead (instead of 5 ms), so that the hold outlasts the claim the wake-up of
// the second message sends, however slow the machine. The second message is published from the
// hook of the claim that leased the first, before the subscription sees that claim's reply.
func TestAMessageDueBeforeAHeldOneIsNotKeptWaitingByTheHold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		var (
			once       sync.Once
			publishErr error
			published  time.Time
		)
		client := faultyClient(t, b, scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			if err == nil && leasedBy(cmd) > 0 && strings.Contains(fmt.Sprint(cmd.(*redis.Cmd).Val()), "held-first") {
				once.Do(func() {
					publishErr = pub.Publish(topic, message.NewMessage("due-now", []byte("x")))
					published = time.Now()
				})
			}
			return err
		}})
		sub := newSubscriberOn(t, client, func(*redisdelay.SubscriberConfig) {})
		redisdelay.SetClaimAheadForTest(sub, 100*time.Millisecond)
		ch := subscribe(t, sub, topic)
		held := message.NewMessage("held-first", []byte("x"))
		delay.Message(held, delay.For(300*time.Millisecond))
		require.NoError(t, pub.Publish(topic, held))

		first := receive(t, ch, 5*time.Second)
		firstAt := time.Now()
		first.Ack()
		second := receive(t, ch, 5*time.Second)
		second.Ack()
		require.NoError(t, publishErr)
		require.False(t, published.IsZero(), "the claim that leased the held message must have been seen")
		require.Equal(t, "due-now", first.UUID, "the message due at once must not wait for the held one")
		require.Equal(t, "held-first", second.UUID)
		due, err := time.Parse(time.RFC3339Nano, second.Metadata.Get(redisdelay.DueTimeMetadataKey))
		require.NoError(t, err)
		assert.True(t, published.Before(due), "the second message must have been published during the hold")
		assert.True(t, firstAt.Before(due), "handed out %s after the held message's due time", firstAt.Sub(due))
		assert.False(t, time.Now().Before(due), "the held message must not be handed out early")
	})
}
