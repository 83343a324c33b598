package redisdelay

// This file declares partitionConsumer, whose methods are spread over the files of the
// consuming side by job (consumer.go, consumer_leases.go, delivery.go, deadline.go,
// deadletter.go), so that each of them depends on the type and none on another's file.

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
	"github.com/watermill-redisdelay/redisdelay/internal/wake"
)

// partitionConsumer is the consumer of one partition of a Subscribe call: a single goroutine that
// runs the claim loop (consumer.go), hands messages out (delivery.go) and acts on their outcome.
// It owns its claim token, its claim size and its retry backoff; what it holds in Redis is in
// its leaseBook. The subscriptions of the partitions of one Subscribe call share its output
// channel and take turns, so that one message at most is in flight.
type partitionConsumer struct {
	cfg              SubscriberConfig
	store            store.Store
	wakeHub          *wake.Hub
	deadLetterGroups *groupCache
	clock            clock.Clock // reads the delay metadata of a nacked message against
	// register registers the group on every partition of the topic (see Subscriber.register).
	register func(ctx context.Context) ([]registration, error)
	// forgetTopic makes the next register write the topic and its dead-letter topic to the
	// topic registry again, which a data loss took away.
	forgetTopic func()
	// ctx ends when the Subscribe context is cancelled or the Subscriber closes; it is the
	// subscription's only stop signal, and every Redis call but the final release derives
	// from it.
	ctx       context.Context
	topic     string      // the topic, for messages and logs
	part      store.Group // the consumer group on the partition, as the store names it
	partition int         // the partition's number
	// epoch is the group's registration on the partition that the subscription claims for,
	// "" until it has registered (see register.lua).
	epoch           string
	deadLetterTopic string
	deadLetterPart  store.Partition
	group           string
	logger          watermill.LoggerAdapter
	// nopLogger: the logger is watermill.NopLogger, so the per-message trace log, whose fields
	// were a sixth of the bytes a delivery allocates, is not built.
	nopLogger bool
	out       chan *message.Message
	turn      chan struct{} // holds a token while a message of the Subscribe call is in flight

	book *leaseBook
	// held counts the messages the Subscriber's subscriptions hold, for its worker record; the
	// book keeps it (see leaseBook.recount).
	held *atomic.Int64
	// wake is the watch of the group's wake channel. A wake-up that arrives while the
	// subscription hands messages out is kept in woken (the earliest due time, Unix µs; -1 for
	// none) until the next claim is sent, which sees its message: for the next sleep, or for a
	// hold that it cuts short with a claim when its message is due first (see holdWatching); a
	// "check now" (0, which RemoveGroup sends) makes it check its leases at once, so that it
	// drops what a removal took away.
	wake  *wake.Watch
	woken int64
	limit int // how many messages the next claim takes
	// claim names the next claim: the subscription's claim record and a token that stays the
	// same until a claim's reply arrives, so a claim whose reply was lost is answered again.
	claim store.ClaimCall
	retry *backoff.ExponentialBackOff
	// windowEnd is when the partition's new-group window ends, on the local clock, once the
	// subscription registered while it was open; zero when there is nothing to clean up. From
	// then on the claim loop drops what the window left (see closeWindow).
	windowEnd time.Time
	// redisClock bounds the Redis clock from below, by which a message claimed ahead of its due
	// time is held until it is due (see claimedOf).
	redisClock redisClock
	// sleeper sleeps the last clock.PreciseTail of the claim loop's waits, on a timerfd kept
	// for the subscription's life.
	sleeper clock.Sleeper
	// claimSent is when the last claim was sent (see deliverPending).
	claimSent time.Time
	// claiming receives the reply to the claim under way (see startClaim); nil while none is.
	claiming chan claimReply
	// failedClaim is the reply of a claim that failed while messages were handed out, for
	// the claim loop to act on (see nextClaim); nil when none did.
	failedClaim *claimReply
	// lastClaim is the reply of the last claim that succeeded, whose next claim time the
	// claim loop sleeps on.
	lastClaim claimReply
	// lateness is the buffer that recordClaim reuses for each claim's lateness.
	lateness []time.Duration
	// recheckPhase is the instant, drawn when the consumer starts, from which its idle
	// rechecks are whole RecheckIntervals apart (see recheckWait).
	recheckPhase time.Time
	// ackSent receives the reply to the acks that sendAcks sent; nil while no such call is under
	// way.
	ackSent chan ackReply
}
