package redisdelay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
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
