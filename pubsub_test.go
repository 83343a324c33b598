package redisdelay_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/watermill-redisdelay/redisdelay"
)

// universalFeatures are the Watermill characteristics this adapter claims.
var universalFeatures = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	Persistent:                          true,
	NewSubscriberReceivesOldMessages:    false,
}

func universalConstructors(b backend) (tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor) {
	cg := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup = group
			c.LeaseTimeout = 5 * time.Second
		})
		return pub, sub
	}
	return func(t *testing.T) (message.Publisher, message.Subscriber) { return cg(t, "") }, cg
}

// TestPubSub runs Watermill's universal Pub/Sub test suite, in long mode unless -short is given,
// against a dedicated redis-server.
func TestPubSub(t *testing.T) {
	b := realRedis(t)
	ps, cg := universalConstructors(b)
	tests.TestPubSub(t, universalFeatures, ps, cg)
}

// TestPubSubMiniredis runs the same suite against embedded miniredis.
func TestPubSubMiniredis(t *testing.T) {
	b := embeddedRedis(t)
	ps, cg := universalConstructors(b)
	tests.TestPubSub(t, universalFeatures, ps, cg)
}
