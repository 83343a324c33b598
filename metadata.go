package redisdelay

// This file is the one home of every metadata key the adapter reads or writes (all start with
// ReservedMetadataPrefix) and of the rules Publish applies to them.

import (
	"errors"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ReservedMetadataPrefix starts every metadata key the adapter writes. Publish refuses other
// keys with this prefix, so that the adapter's keys keep their meaning.
const ReservedMetadataPrefix = "_redisdelay_"

// AttemptMetadataKey is set on every delivered message to its delivery attempt in its consumer
// group, in decimal: "1" on the first delivery, "2" after one Nack or one expired lease, and so
// on. A message released unhandled by Close does not use up an attempt. Publish drops the key,
// so a message re-published from a handler starts again at attempt 1.
const AttemptMetadataKey = ReservedMetadataPrefix + "attempt"

// DueTimeMetadataKey is set on every delivered message to the due time it was delivered for:
// RFC3339 with microseconds, UTC, on the Redis clock. The claim time minus it is the delivery's
// lateness. Publish drops the key.
const DueTimeMetadataKey = ReservedMetadataPrefix + "due_time"

// ServedDelayMetadataKey is set on a delivered message that carries Watermill's delay metadata,
// to the values that decided its due time: _watermill_delayed_until, "|",
// _watermill_delayed_for. A message re-published with the same delay metadata (by a poison
// queue, a requeuer or a forwarder) has served that delay already and is due at once; a handler
// or middleware that sets a new delay changes the metadata and is delayed as usual. Publish
// drops the key.
const ServedDelayMetadataKey = ReservedMetadataPrefix + "served_delay"

// KeyMetadataKey is the metadata key that holds a message's key; WithKey sets it. Publish
// stores the key apart from the marshaled message (it is part of the message's internal ID,
// and is not paid for twice), and every delivery and dead letter carries it again, but for a
// new-group window's copy of a message that every group was done with, which a group
// registered within the window receives without its key (docs/guarantees.md, "Keys and the
// window"). A dead letter is stored without a key on its dead-letter topic; re-publishing it
// to its source topic uses the key again.
const KeyMetadataKey = ReservedMetadataPrefix + "key"

// OnDuplicateMetadataKey is the metadata key that overrides PublisherConfig.OnDuplicate for one
// message; its value is a DuplicatePolicy. Publish acts on it and does not store it.
const OnDuplicateMetadataKey = ReservedMetadataPrefix + "on_duplicate"

// DebounceMaxWaitMetadataKey is the metadata key that sets, for one keep-later message (see
// KeepLater and WithDebounce), its debounce cap: a Go duration ("30s", "5m"; at least 1µs, at
// most MaxDelay, µs precision) that overrides PublisherConfig.DebounceMaxWait. While its key is republished, the
// message is due no later than this long after the first publish that asked for a cap, on the
// Redis clock. Publish refuses it on a message without a key or with another duplicate policy,
// acts on it and does not store it.
const DebounceMaxWaitMetadataKey = ReservedMetadataPrefix + "debounce_max_wait"

// Metadata of deliver-by deadlines (see deadline.go and docs/delays.md). A consumer group
// checks them when it claims a message for its first attempt: one claimed after its deadline,
// on the Redis clock, is not handed out but expired (SubscriberConfig.OnExpired). Publish
// checks their values and stores them with the message; a dead letter loses them.
const (
	// DeliverByMetadataKey holds a message's absolute deliver-by deadline on the Redis clock:
	// RFC 3339, UTC or with an offset, fractional seconds allowed, microsecond precision
	// (finer digits are truncated). WithDeliverBy sets it.
	DeliverByMetadataKey = ReservedMetadataPrefix + "deliver_by"
	// DeliverWithinMetadataKey holds a deadline relative to the message's due time, as a
	// positive Go duration ("30s", "1h30m"): the deadline is the due time (on the Redis clock)
	// plus it, and moves with the due time (Inspector.Reschedule, RunNow). The Publisher sets
	// it from PublisherConfig.DeliverWithin on a message that has neither key. With both keys,
	// the earlier deadline applies.
	DeliverWithinMetadataKey = ReservedMetadataPrefix + "deliver_within"
)

// Metadata of batching.
const (
	// BatchKeyMetadataKey holds the batch key of a message to publish into a batch (set it
	// with WithBatchKey), and of a released batch.
	BatchKeyMetadataKey = ReservedMetadataPrefix + "batch_key"
	// BatchItemsMetadataKey is the number of items of a released batch, in decimal.
	BatchItemsMetadataKey = ReservedMetadataPrefix + "batch_items"
	// BatchTriggerMetadataKey is what released a batch: BatchTriggerSize, BatchTriggerTime or
	// BatchTriggerFlush.
	BatchTriggerMetadataKey = ReservedMetadataPrefix + "batch_trigger"
)

// Values of BatchTriggerMetadataKey.
const (
	BatchTriggerSize  = "size"  // it reached MaxItems or MaxBytes
	BatchTriggerTime  = "time"  // MaxWait passed after its first item
	BatchTriggerFlush = "flush" // Inspector.RunNow with ByBatchKey
)

// servedDelay is the value of ServedDelayMetadataKey for the given delay metadata.
func servedDelay(until, delayFor string) string { return until + "|" + delayFor }

// deliveryMetadata are the keys a Subscriber sets on each delivery, which Publish does not store
// with the message: the delivery keys, so that a message re-published from a handler starts
// afresh, and the message key, its policy and its debounce cap, which Publish reads first and
// keeps apart (the key is part of the message's internal ID, and each delivery carries it
// again).
var deliveryMetadata = []string{AttemptMetadataKey, DueTimeMetadataKey, ServedDelayMetadataKey, KeyMetadataKey, OnDuplicateMetadataKey, DebounceMaxWaitMetadataKey}

// Metadata a dead letter gains when it is moved to its dead-letter topic. Publish keeps these
// keys, so a dead letter can be re-published as it is.
const (
	// DeadLetterTopicMetadataKey is the topic the message ran out of attempts on.
	DeadLetterTopicMetadataKey = ReservedMetadataPrefix + "dead_letter_topic"
	// DeadLetterGroupMetadataKey is the consumer group it ran out of attempts in.
	DeadLetterGroupMetadataKey = ReservedMetadataPrefix + "dead_letter_group"
	// DeadLetterAttemptsMetadataKey is the number of attempts it had, in decimal.
	DeadLetterAttemptsMetadataKey = ReservedMetadataPrefix + "dead_letter_attempts"
	// DeadLetterReasonMetadataKey is why the last attempt failed: DeadLetterReasonNacked or
	// DeadLetterReasonLeaseExpired; or DeadLetterReasonExpired when the message had no attempt.
	DeadLetterReasonMetadataKey = ReservedMetadataPrefix + "dead_letter_reason"
)

// Values of DeadLetterReasonMetadataKey.
const (
	// DeadLetterReasonNacked means the last attempt ended with Nack.
	DeadLetterReasonNacked = "nacked"
	// DeadLetterReasonLeaseExpired means the last attempt was never acknowledged: its lease
	// expired (the consumer crashed or lost Redis), or its subscription stopped first.
	DeadLetterReasonLeaseExpired = "lease expired"
	// DeadLetterReasonExpired means the message was never handed out: its group claimed it for
	// its first attempt after its deliver-by deadline (DeliverByMetadataKey,
	// DeliverWithinMetadataKey). Its DeadLetterAttemptsMetadataKey is "1".
	DeadLetterReasonExpired = "expired"
)

// publishableReserved are the reserved keys Publish accepts: the delivery keys, which it drops,
// the message key, the duplicate policy and the debounce cap, which it reads, and the
// deadlines and the dead-letter keys, which it keeps.
var publishableReserved = map[string]bool{
	KeyMetadataKey:                true,
	OnDuplicateMetadataKey:        true,
	DebounceMaxWaitMetadataKey:    true,
	BatchKeyMetadataKey:           true,
	AttemptMetadataKey:            true,
	DueTimeMetadataKey:            true,
	ServedDelayMetadataKey:        true,
	DeliverByMetadataKey:          true,
	DeliverWithinMetadataKey:      true,
	DeadLetterTopicMetadataKey:    true,
	DeadLetterGroupMetadataKey:    true,
	DeadLetterAttemptsMetadataKey: true,
	DeadLetterReasonMetadataKey:   true,
	ScheduleMetadataKey:           true,
	TickTimeMetadataKey:           true,
}

// The keys a Scheduler sets on each tick's message (see Schedule).
const (
	// ScheduleMetadataKey holds the name of the schedule that published the message.
	ScheduleMetadataKey = ReservedMetadataPrefix + "schedule"
	// TickTimeMetadataKey holds the tick's nominal time: the instant its spec names, before
	// jitter, in UTC, RFC 3339 with nanoseconds (time.RFC3339Nano). For a message of
	// Scheduler.Trigger, the Redis clock's time of the call.
	TickTimeMetadataKey = ReservedMetadataPrefix + "tick_time"
)

// checkReservedMetadata refuses a metadata key that starts with ReservedMetadataPrefix and is
// not one the adapter itself puts on delivered messages.
func checkReservedMetadata(msg *message.Message) *metadataError {
	for k, v := range msg.Metadata {
		if strings.HasPrefix(k, ReservedMetadataPrefix) && !publishableReserved[k] {
			return &metadataError{key: k, value: v, err: errors.New("the " + ReservedMetadataPrefix + " prefix is reserved for the adapter")}
		}
	}
	return nil
}

// withoutDeliveryMetadata returns msg, or a copy of it (context included) without the keys a
// Subscriber sets on each delivery when it has any.
func withoutDeliveryMetadata(msg *message.Message) *message.Message {
	found := false
	for _, k := range deliveryMetadata {
		_, ok := msg.Metadata[k]
		found = found || ok
	}
	if !found {
		return msg
	}
	c := msg.Copy()
	for _, k := range deliveryMetadata {
		delete(c.Metadata, k)
	}
	c.SetContext(msg.Context())
	return c
}
