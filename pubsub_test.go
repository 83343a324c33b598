package redisdelay_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
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

// universalSuite runs Watermill's universal Pub/Sub test suite against b: in long mode (5,000
// to 10,000 messages a test) with REDISDELAY_LONG=1, in short mode (50 to 100) without it.
func universalSuite(t *testing.T, b backend) {
	features := universalFeatures
	features.ForceShort = !redistest.Long(t)
	ps, cg := universalConstructors(b)
	tests.TestPubSub(t, features, ps, cg)
}

// TestPubSub runs Watermill's universal Pub/Sub test suite against a dedicated redis-server: in
// long mode (up to 10,000 messages a test) with REDISDELAY_LONG=1, in short mode (50 to 100)
// without it.
func TestPubSub(t *testing.T) {
	universalSuite(t, realRedis(t))
}

// TestPubSubMiniredis runs the suite in long mode against embedded miniredis, with
// REDISDELAY_LONG=1 only: the quick run has TestPubSub.
func TestPubSubMiniredis(t *testing.T) {
	redistest.SkipUnlessLong(t, "Watermill's universal suite in long mode on miniredis, about 2 min with -race")
	universalSuite(t, embeddedRedis(t))
}
