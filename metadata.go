package redisdelay

// This file is the one home of every metadata key the adapter reads or writes (all start with
// ReservedMetadataPrefix), and of the code that writes them: the With… setters, and the keys a
// received message gains (a delivery's, a dead letter's, a released batch's). options.go reads
// them.

import (
	"strconv"
	"time"

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

// The keys a schedule.Scheduler sets on each tick's message (see package schedule).
const (
	// ScheduleMetadataKey holds the name of the schedule that published the message.
	ScheduleMetadataKey = ReservedMetadataPrefix + "schedule"
	// TickTimeMetadataKey holds the tick's nominal time: the instant its spec names, before
	// jitter, in UTC, RFC 3339 with nanoseconds (time.RFC3339Nano). For a message of
	// schedule.Scheduler.Trigger, the Redis clock's time of the call.
	TickTimeMetadataKey = ReservedMetadataPrefix + "tick_time"
)

// dueTimeLayout formats DueTimeMetadataKey: RFC3339 with microseconds, the precision of due
// times.
const dueTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// deadlineLayout formats DeliverByMetadataKey: RFC 3339 with microseconds, the precision of
// due times and of the Redis clock the deadline is compared with.
const deadlineLayout = dueTimeLayout

// WithKey sets msg's key (KeyMetadataKey) and returns msg. Publish validates the key (see
// ValidateKey).
func WithKey(msg *message.Message, key string) *message.Message {
	msg.Metadata.Set(KeyMetadataKey, key)
	return msg
}

// WithDebounce makes msg a debounced message and returns msg: it sets its key (as WithKey), the
// KeepLater policy (OnDuplicateMetadataKey) and, unless maxWait is 0, its max wait
// (DebounceMaxWaitMetadataKey, µs precision; Publish refuses one under 1µs or over MaxDelay,
// with ErrBeyondMaxDelay); with maxWait 0,
// PublisherConfig.DebounceMaxWait applies. Each publish of the key with a later due time then replaces the waiting message, but
// never beyond maxWait after the first publish that asked for a cap. Publish validates the key
// and the cap.
func WithDebounce(msg *message.Message, key string, maxWait time.Duration) *message.Message {
	msg.Metadata.Set(KeyMetadataKey, key)
	msg.Metadata.Set(OnDuplicateMetadataKey, string(KeepLater))
	if maxWait != 0 {
		msg.Metadata.Set(DebounceMaxWaitMetadataKey, maxWait.String())
	}
	return msg
}

// WithDeliverBy sets msg's deliver-by deadline (DeliverByMetadataKey) to t, an absolute instant
// read on the Redis clock, to the microsecond (finer is truncated), and returns msg. A consumer
// group that claims msg for its first attempt after t does not hand it out: it dead-letters it
// with DeadLetterReasonExpired, or drops it (SubscriberConfig.OnExpired). Publish refuses a t
// more than MaxDelay after its clock's now (ErrBeyondMaxDelay). In a test with redisdelaytest,
// the Redis clock is the virtual one: use q.Now().Add(d).
func WithDeliverBy(msg *message.Message, t time.Time) *message.Message {
	msg.Metadata.Set(DeliverByMetadataKey, t.UTC().Format(deadlineLayout))
	return msg
}

// WithBatchKey sets msg's batch key (BatchKeyMetadataKey) and returns msg. The key follows the
// rules of message keys (ValidateKey); the topic must be configured for batching.
func WithBatchKey(msg *message.Message, key string) *message.Message {
	msg.Metadata.Set(BatchKeyMetadataKey, key)
	return msg
}

// withDeliverWithin returns msg, or, when window is positive and msg, with options o, is no
// batch item and has no deadline of its own, a copy of it (context included) with
// DeliverWithinMetadataKey set to window: Publish never changes the caller's message.
func withDeliverWithin(msg *message.Message, o options, window time.Duration) *message.Message {
	if window <= 0 || o.batched || o.hasDeliverBy || o.deliverWithin > 0 {
		return msg
	}
	c := msg.Copy()
	c.Metadata.Set(DeliverWithinMetadataKey, window.String())
	c.SetContext(msg.Context())
	return c
}

// setDeliveryMetadata sets the keys a delivery of msg, with options o, carries: the attempt,
// the due time (Unix µs, Redis clock), and the delay metadata that due time served (see
// ServedDelayMetadataKey). (receivedOptions set the message key first: a dead letter carries it
// too.)
func setDeliveryMetadata(msg *message.Message, o received, attempt, dueUs int64) {
	msg.Metadata.Set(AttemptMetadataKey, strconv.FormatInt(attempt, 10))
	msg.Metadata.Set(DueTimeMetadataKey, time.UnixMicro(dueUs).UTC().Format(dueTimeLayout))
	if o.delayedUntil != "" || o.delayedFor != "" {
		msg.Metadata.Set(ServedDelayMetadataKey, servedDelay(o.delayedUntil, o.delayedFor))
	}
}

// setDeadLetterMetadata makes letter a dead letter of topic and group after attempts, for
// reason: it loses its deliver-by deadlines and gains the dead-letter keys, and its message
// key, key when keyed, since the letter itself is stored without a key.
func setDeadLetterMetadata(letter *message.Message, topic, group string, attempts int64, reason, key string, keyed bool) {
	delete(letter.Metadata, DeliverByMetadataKey)
	delete(letter.Metadata, DeliverWithinMetadataKey)
	letter.Metadata.Set(DeadLetterTopicMetadataKey, topic)
	letter.Metadata.Set(DeadLetterGroupMetadataKey, group)
	letter.Metadata.Set(DeadLetterAttemptsMetadataKey, strconv.FormatInt(attempts, 10))
	letter.Metadata.Set(DeadLetterReasonMetadataKey, reason)
	if keyed {
		letter.Metadata.Set(KeyMetadataKey, key)
	}
}

// setBatchMetadata sets the keys of a released batch on msg: its batch key, what released it,
// and its number of items unless items < 0 (a preview, which does not count them).
func setBatchMetadata(msg *message.Message, batchKey, trigger string, items int) {
	msg.Metadata.Set(BatchKeyMetadataKey, batchKey)
	msg.Metadata.Set(BatchTriggerMetadataKey, trigger)
	if items >= 0 {
		msg.Metadata.Set(BatchItemsMetadataKey, strconv.Itoa(items))
	}
}

// setKeyMetadata sets the message key in md, the metadata of a listed message, which is stored
// without its key.
func setKeyMetadata(md message.Metadata, key string) { md.Set(KeyMetadataKey, key) }
