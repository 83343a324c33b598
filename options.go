package redisdelay

// This file turns a message's metadata into one typed value, options, in one pass (scan):
// Publish reads and checks it (publishOptions), and a consumer reads it once per delivery and
// keeps it with the claim (receivedOptions). With the Marshaler, it is the only code that reads
// a message's metadata. The keys, and the code that writes them, are in metadata.go.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// received are the options of a message that a consumer reads once, when it decodes a claimed
// message, and keeps with the claim (the deadline at the claim, the served delay, the nack
// decision): the part of options a delivery needs, so that a claim holds no more. An absent
// entry gives the zero value.
type received struct {
	// Watermill's delay metadata as written, "" when absent: a delivery records it
	// (ServedDelayMetadataKey), and a Nack compares the handler's with it.
	delayedUntil, delayedFor string
	key                      string // the message key (KeyMetadataKey), when keyed
	keyed                    bool
	// The deliver-by deadlines: an absolute one (Unix µs, Redis clock) when hasDeliverBy, and
	// one relative to the due time when deliverWithin > 0.
	deliverByUs   int64
	hasDeliverBy  bool
	deliverWithin time.Duration
	// badDeadline is a deadline value of a received message that cannot be read (Publish
	// refuses those, so only a message stored by other means has one): it is ignored.
	badDeadline error
	batchKey    string // the batch key of a batch item (BatchKeyMetadataKey), when batched
	batched     bool
}

// isZero reports whether r holds no option at all: a plain message.
func (r received) isZero() bool {
	return r.delayedUntil == "" && r.delayedFor == "" && !r.keyed && r.key == "" && !r.hasDeliverBy &&
		r.deliverByUs == 0 && r.deliverWithin == 0 && r.badDeadline == nil && !r.batched && r.batchKey == ""
}

// options are the adapter's options of one message, read from its metadata: what a consumer
// keeps (received) and what only Publish reads. An absent entry gives the zero value.
type options struct {
	received
	// The due time the delay metadata asks for (see scheduleOf): delay after now, or at, an
	// instant on the Redis clock; latest bounds it. Set by publishOptions only.
	delay      time.Duration
	at, latest time.Time
	// A keyed message's duplicate policy and debounce cap: its own (OnDuplicateMetadataKey,
	// DebounceMaxWaitMetadataKey) or the PublisherConfig's; the cap is 0 but for KeepLater.
	// Set by publishOptions only.
	policy          DuplicatePolicy
	maxWait         time.Duration
	partitionKey    string // the value of the PublisherConfig.PartitionKey entry, when hasPartitionKey
	hasPartitionKey bool
}

// entries are the metadata entries the adapter reads, as written, and which are present.
type entries struct {
	until, delayFor, served, key, onDuplicate, maxWait string
	deliverBy, deliverWithin, batchKey, partitionKey   string
	refusedKey, refusedValue                           string // a reserved key Publish refuses
	has                                                entrySet
}

// entrySet says which entries a message has.
type entrySet uint16

const (
	hasUntil entrySet = 1 << iota
	hasFor
	hasServed
	hasKey
	hasOnDuplicate
	hasMaxWait
	hasDeliverBy
	hasDeliverWithin
	hasBatchKey
	hasPartitionKey
	hasRefused // a key with ReservedMetadataPrefix that Publish refuses
)

// scan reads md in one pass. partitionKey is PublisherConfig.PartitionKey, "" for none.
func scan(md message.Metadata, partitionKey string) entries {
	var e entries
	for k, v := range md {
		if k == partitionKey && partitionKey != "" {
			e.partitionKey, e.has = v, e.has|hasPartitionKey
		}
		switch k {
		case delay.DelayedUntilKey:
			e.until, e.has = v, e.has|hasUntil
		case delay.DelayedForKey:
			e.delayFor, e.has = v, e.has|hasFor
		case ServedDelayMetadataKey:
			e.served, e.has = v, e.has|hasServed
		case KeyMetadataKey:
			e.key, e.has = v, e.has|hasKey
		case OnDuplicateMetadataKey:
			e.onDuplicate, e.has = v, e.has|hasOnDuplicate
		case DebounceMaxWaitMetadataKey:
			e.maxWait, e.has = v, e.has|hasMaxWait
		case DeliverByMetadataKey:
			e.deliverBy, e.has = v, e.has|hasDeliverBy
		case DeliverWithinMetadataKey:
			e.deliverWithin, e.has = v, e.has|hasDeliverWithin
		case BatchKeyMetadataKey:
			e.batchKey, e.has = v, e.has|hasBatchKey
		case AttemptMetadataKey, DueTimeMetadataKey, DeadLetterTopicMetadataKey, DeadLetterGroupMetadataKey,
			DeadLetterAttemptsMetadataKey, DeadLetterReasonMetadataKey, ScheduleMetadataKey, TickTimeMetadataKey:
			// Reserved keys Publish accepts: it drops the delivery keys and keeps the others.
		default:
			if strings.HasPrefix(k, ReservedMetadataPrefix) && e.has&hasRefused == 0 {
				e.refusedKey, e.refusedValue, e.has = k, v, e.has|hasRefused
			}
		}
	}
	return e
}

// publishOptions reads the options of msg for Publish to topic with cfg, at now on the
// publishing client's clock (on a virtual clock when virtual: see scheduleOf), and checks them
// in this order: the delay metadata, reserved keys, the deadlines, the key with its policy and
// debounce cap, a batch item. The first problem is returned, a *metadataError naming the
// entry.
func publishOptions(msg *message.Message, cfg *PublisherConfig, topic string, now time.Time, virtual bool) (options, error) {
	e := scan(msg.Metadata, cfg.PartitionKey)
	o := options{received: received{delayedUntil: e.until, delayedFor: e.delayFor}, partitionKey: e.partitionKey, hasPartitionKey: e.has&hasPartitionKey != 0}
	var err error
	if o.delay, o.at, o.latest, err = scheduleOf(e, now, virtual); err != nil {
		return o, err
	}
	if e.has&hasRefused != 0 {
		return o, &metadataError{key: e.refusedKey, value: e.refusedValue, err: errors.New("the " + ReservedMetadataPrefix + " prefix is reserved for the adapter")}
	}
	if me := o.readDeadlines(e, now); me != nil {
		return o, me
	}
	if me := o.readKey(e, cfg.OnDuplicate, cfg.DebounceMaxWait); me != nil {
		return o, me
	}
	_, batching := cfg.Batching[topic]
	if me := o.readBatchItem(e, batching); me != nil {
		return o, me
	}
	return o, nil
}

// receivedOptions reads the options of msg, decoded for a delivery, once; it first sets msg's
// message key to key when keyed, since the key is stored apart from the message. A deadline
// value that cannot be read is ignored and kept in badDeadline.
func receivedOptions(msg *message.Message, key string, keyed bool) received {
	if keyed {
		msg.Metadata.Set(KeyMetadataKey, key)
	}
	e := scan(msg.Metadata, "")
	o := received{delayedUntil: e.until, delayedFor: e.delayFor, key: e.key, keyed: e.has&hasKey != 0, batchKey: e.batchKey, batched: e.has&hasBatchKey != 0}
	if e.has&hasDeliverBy != 0 {
		if us, err := parseDeliverBy(e.deliverBy); err != nil {
			o.badDeadline = &metadataError{key: DeliverByMetadataKey, value: e.deliverBy, err: err}
		} else {
			o.deliverByUs, o.hasDeliverBy = us, true
		}
	}
	if e.has&hasDeliverWithin != 0 {
		if d, err := parseDeliverWithin(e.deliverWithin); err != nil {
			o.badDeadline = errors.Join(o.badDeadline, &metadataError{key: DeliverWithinMetadataKey, value: e.deliverWithin, err: err})
		} else {
			o.deliverWithin = d
		}
	}
	return o
}

// readDeadlines reads the deadlines of e for Publish, refusing a value that a consumer could
// not read or that lies more than MaxDelay after now.
func (o *options) readDeadlines(e entries, now time.Time) *metadataError {
	if e.has&hasDeliverBy != 0 {
		us, err := parseDeliverBy(e.deliverBy)
		if err == nil {
			err = checkAhead(time.UnixMicro(us).Sub(now))
		}
		if err != nil {
			return &metadataError{key: DeliverByMetadataKey, value: e.deliverBy, err: err}
		}
		o.deliverByUs, o.hasDeliverBy = us, true
	}
	if e.has&hasDeliverWithin != 0 {
		d, err := parseDeliverWithin(e.deliverWithin)
		if err == nil {
			err = checkAhead(d)
		}
		if err != nil {
			return &metadataError{key: DeliverWithinMetadataKey, value: e.deliverWithin, err: err}
		}
		o.deliverWithin = d
	}
	return nil
}

// parseDeliverBy reads a DeliverByMetadataKey value: Unix µs on the Redis clock.
func parseDeliverBy(v string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, errors.New("want an RFC 3339 time such as 2030-01-01T12:00:00.5Z (see WithDeliverBy)")
	}
	return t.UnixMicro(), nil
}

// parseDeliverWithin reads a DeliverWithinMetadataKey value: a positive duration.
func parseDeliverWithin(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive Go duration such as 30s or 1h30m")
	}
	return d, nil
}

// readKey reads the message key of e with its duplicate policy (else policy,
// PublisherConfig.OnDuplicate) and its debounce cap (else maxWait,
// PublisherConfig.DebounceMaxWait). It refuses a bad key, policy or cap, and a cap on a
// message without a key or of another policy than KeepLater.
func (o *options) readKey(e entries, policy DuplicatePolicy, maxWait time.Duration) *metadataError {
	if e.has&hasKey == 0 {
		if e.has&hasMaxWait != 0 {
			return &metadataError{key: DebounceMaxWaitMetadataKey, value: e.maxWait, err: errors.New("a debounce cap needs a message key (WithDebounce)")}
		}
		return nil
	}
	if err := ValidateKey(e.key); err != nil {
		return &metadataError{key: KeyMetadataKey, value: e.key, err: err}
	}
	if e.has&hasOnDuplicate != 0 {
		policy = DuplicatePolicy(e.onDuplicate)
	}
	if policy.scriptCode() == "" {
		return &metadataError{key: OnDuplicateMetadataKey, value: string(policy), err: errors.New(`want "keep", "replace", "keep-earlier" or "keep-later"`)}
	}
	if e.has&hasMaxWait != 0 {
		d, err := parseMaxWait(e.maxWait, policy)
		if err != nil {
			return &metadataError{key: DebounceMaxWaitMetadataKey, value: e.maxWait, err: err}
		}
		maxWait = d
	}
	if policy != KeepLater {
		maxWait = 0
	}
	o.key, o.keyed, o.policy, o.maxWait = e.key, true, policy, maxWait
	return nil
}

// parseMaxWait reads a DebounceMaxWaitMetadataKey value of a message of policy.
func parseMaxWait(v string, policy DuplicatePolicy) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, errors.New(`want a Go duration such as "30s"`)
	case d < time.Microsecond:
		return 0, errors.New("want at least 1µs")
	case d > MaxDelay:
		return 0, checkAhead(d)
	case policy != KeepLater:
		return 0, fmt.Errorf(`a debounce cap needs the %q duplicate policy, not %q`, KeepLater, policy)
	}
	return d, nil
}

// readBatchItem reads the batch key of e, refusing a batch item that cannot be stored: on a
// topic without batching, with a bad batch key, or with a message key, a delay or a deadline.
func (o *options) readBatchItem(e entries, batching bool) *metadataError {
	if e.has&hasBatchKey == 0 {
		return nil
	}
	if !batching {
		return &metadataError{key: BatchKeyMetadataKey, value: e.batchKey, err: errors.New("the topic is not configured for batching (PublisherConfig.Batching)")}
	}
	if err := ValidateKey(e.batchKey); err != nil {
		return &metadataError{key: BatchKeyMetadataKey, value: e.batchKey, err: err}
	}
	switch has := e.has; {
	case has&hasKey != 0:
		return &metadataError{key: KeyMetadataKey, value: e.key, err: errors.New("a batch item cannot have a message key")}
	case has&(hasFor|hasUntil) != 0:
		me := &metadataError{key: delay.DelayedForKey, value: e.delayFor, err: errors.New("a batch item cannot have a delay: its batch's MaxWait decides when it is delivered")}
		if has&hasFor == 0 {
			me.key, me.value = delay.DelayedUntilKey, e.until
		}
		return me
	case has&(hasDeliverBy|hasDeliverWithin) != 0:
		me := &metadataError{key: DeliverByMetadataKey, value: e.deliverBy, err: errors.New("a batch item cannot have a deliver-by deadline: a released batch is delivered as one message, which has none")}
		if has&hasDeliverBy == 0 {
			me.key, me.value = DeliverWithinMetadataKey, e.deliverWithin
		}
		return me
	}
	o.batchKey, o.batched = e.batchKey, true
	return nil
}

// delayOf is DelayOf, on a virtual clock when virtual (see scheduleOf).
func delayOf(msg *message.Message, now time.Time, virtual bool) (time.Duration, error) {
	return delayOfEntries(scan(msg.Metadata, ""), now, virtual)
}

func delayOfEntries(e entries, now time.Time, virtual bool) (time.Duration, error) {
	d, at, _, err := scheduleOf(e, now, virtual)
	if !at.IsZero() {
		d = max(at.Sub(now), 0)
	}
	return d, err
}

// redelay returns the delay that delivered, a nacked message as its handler left it (without
// delivery metadata), asks for when the handler changed its delay metadata from kept's, the
// options it was delivered with (as middleware.DelayOnError does); changed is false when it
// did not. err is DelayOf's for a changed delay that cannot be read.
func redelay(kept received, delivered *message.Message, now time.Time, virtual bool) (d time.Duration, changed bool, err error) {
	e := scan(delivered.Metadata, "")
	if e.until == kept.delayedUntil && e.delayFor == kept.delayedFor {
		return 0, false, nil
	}
	d, err = delayOfEntries(e, now, virtual)
	return d, true, err
}

// metadataError is a problem with one metadata entry; Publish turns it into a MessageError.
type metadataError struct {
	key, value string
	err        error
}

func (e *metadataError) Error() string {
	return fmt.Sprintf("metadata %s=%s: %v", quote(e.key), quote(e.value), e.err)
}

func (e *metadataError) Unwrap() error { return e.err }

// messageKeyOf returns msg's message key, "" without one.
func messageKeyOf(msg *message.Message) string { return msg.Metadata.Get(KeyMetadataKey) }

// batchKeyOf returns msg's batch key, "" without one.
func batchKeyOf(msg *message.Message) string { return msg.Metadata.Get(BatchKeyMetadataKey) }

// deadLetterOf reads what dead-lettering wrote into md, a dead letter's metadata: the reason,
// the message key ("" without one) and the attempts (ok false when they cannot be read).
func deadLetterOf(md message.Metadata) (reason, key string, attempts int, ok bool) {
	attempts, err := strconv.Atoi(md[DeadLetterAttemptsMetadataKey])
	return md[DeadLetterReasonMetadataKey], md[KeyMetadataKey], attempts, err == nil
}

// withoutDeliveryMetadata returns msg, or a copy of it (context included) without the keys
// Publish does not store (deliveryMetadata) when it has any.
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

// keySpec is the key spec of a message with options o for the publish script: "" without a
// key, else store.KeySpec's with its policy and debounce cap, and retention
// (PublisherConfig.KeyRetention).
func (o options) keySpec(retention time.Duration) string {
	if !o.keyed {
		return ""
	}
	return store.KeySpec(o.policy.scriptCode(), retention, o.maxWait, o.key)
}
