package redisdelay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

// A W3C trace context, as OpenTelemetry's Watermill middlewares put it in metadata.
const (
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tracestate  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

func TestTraceContextSurvivesDelayNackExpiredLeaseAndDeadLetter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		check := func(msg *message.Message, step string) {
			t.Helper()
			assert.Equal(t, traceparent, msg.Metadata.Get("traceparent"), step)
			assert.Equal(t, tracestate, msg.Metadata.Get("tracestate"), step)
		}
		// A subscriber whose heartbeat never reaches Redis: the lease of what it holds expires.
		stuck := newSubscriberOn(t, faultyClient(t, b, scriptFault{match: isExtendCall, around: func(context.Context, redis.Cmder, redis.ProcessHook) error {
			return errors.New("extend dropped by the test")
		}}), func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = 300 * time.Millisecond })
		require.NoError(t, stuck.SubscribeInitialize(topic))

		msg := message.NewMessage("traced", []byte("payload"))
		msg.Metadata.Set("traceparent", traceparent)
		msg.Metadata.Set("tracestate", tracestate)
		delay.Message(msg, delay.For(200*time.Millisecond))
		require.NoError(t, pub.Publish(topic, msg))

		held := receive(t, subscribe(t, stuck, topic), 5*time.Second)
		check(held, "after a delay")
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.MaxAttempts = 3
			c.NackBackoff = redisdelay.ConstantBackoff(100 * time.Millisecond)
		})
		ch := subscribe(t, sub, topic)
		second := receive(t, ch, 5*time.Second)
		require.Equal(t, "2", second.Metadata.Get(redisdelay.AttemptMetadataKey))
		check(second, "after an expired lease")
		second.Nack()
		third := receive(t, ch, 5*time.Second)
		require.Equal(t, "3", third.Metadata.Get(redisdelay.AttemptMetadataKey))
		check(third, "after a nack with backoff")
		third.Nack()

		letter := receive(t, subscribe(t, newSubscriber(t, b, nil), redisdelay.DefaultDeadLetterTopic(topic, redisdelay.DefaultConsumerGroup)), 5*time.Second)
		assert.Equal(t, "traced", letter.UUID)
		check(letter, "as a dead letter")
		letter.Ack()
	})
}
