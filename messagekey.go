package redisdelay

// This file owns message keys on the publishing side: WithKey, ValidateKey, the duplicate
// policies and the partition of a key.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Message keys: a message can carry a business key ("order-42"), unique per topic while the
// message lives, by which it is deduplicated on publish and found again by the Inspector
// (Cancel, Reschedule, RunNow, Status), in O(log N) per consumer group.

// MaxKeyLength is the longest message key, in bytes.
const MaxKeyLength = 256

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

// ValidateKey reports whether key can be a message key: non-empty, at most MaxKeyLength bytes,
// valid UTF-8 without control characters or characters that change the direction of text (see
// ValidateName), so that it reads the same in logs, the CLI, the dashboard and Redis. The error wraps ErrInvalidKey and names what is wrong.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("%w: the key is %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: the key is not valid UTF-8", ErrInvalidKey)
	}
	if r, ok := hiddenRune(key); ok {
		return fmt.Errorf("%w: the key holds %s %U", ErrInvalidKey, hiddenKind(r), r)
	}
	return nil
}

// DuplicatePolicy decides what Publish does with a keyed message whose key is taken: by a
// message still scheduled or in flight in some consumer group, or by a finished one whose
// history is kept (PublisherConfig.KeyRetention). Its values are the strings accepted in
// OnDuplicateMetadataKey.
type DuplicatePolicy string

const (
	// KeepExisting keeps the existing message and stores nothing: the outcome is Duplicate.
	// The default.
	KeepExisting DuplicatePolicy = "keep"
	// ReplaceExisting replaces the existing message with the new one (payload, metadata and
	// due time) in every consumer group where it is due, a message waiting for a retry
	// included: the outcome is Replaced. A group that holds it in flight finishes that
	// delivery; should it be nacked, the retry carries the new message. Where no group holds
	// it due (all in flight or finished), the outcome is Duplicate.
	ReplaceExisting DuplicatePolicy = "replace"
	// KeepEarlier keeps whichever of the two is due earlier: the new message replaces the
	// existing one, as ReplaceExisting, when its due time is earlier than the existing one's
	// earliest due time in any group; otherwise the outcome is Duplicate.
	KeepEarlier DuplicatePolicy = "keep-earlier"
	// KeepLater keeps whichever is due later (debounce): the new message replaces the existing
	// one when its due time is later; otherwise the outcome is Duplicate. With a max wait
	// (PublisherConfig.DebounceMaxWait, DebounceMaxWaitMetadataKey), the message is never due
	// later than that long after the first publish of its key that asked for a cap: a later due
	// time is pulled back to that cap before the comparison.
	KeepLater DuplicatePolicy = "keep-later"
)

// scriptCode is the policy as the publish script reads it, or "" when it is unknown.
func (p DuplicatePolicy) scriptCode() string {
	switch p {
	case KeepExisting, "":
		return store.KeepExisting
	case ReplaceExisting:
		return store.ReplaceExisting
	case KeepEarlier:
		return store.KeepEarlier
	case KeepLater:
		return store.KeepLater
	}
	return ""
}

// keySpecOf returns the key spec of msg for the publish script: "" without a key, else
// store.KeySpec's, with the debounce cap of msg (DebounceMaxWaitMetadataKey, else maxWait) when
// its policy is KeepLater. A bad key, policy or cap, or a cap on a message without a key or of
// another policy, is a *metadataError.
func keySpecOf(msg *message.Message, policy DuplicatePolicy, retention, maxWait time.Duration) (string, *metadataError) {
	key, ok := msg.Metadata[KeyMetadataKey]
	wait, hasWait := msg.Metadata[DebounceMaxWaitMetadataKey]
	if !ok {
		if hasWait {
			return "", &metadataError{key: DebounceMaxWaitMetadataKey, value: wait, err: errors.New("a debounce cap needs a message key (WithDebounce)")}
		}
		return "", nil
	}
	if err := ValidateKey(key); err != nil {
		return "", &metadataError{key: KeyMetadataKey, value: key, err: err}
	}
	if v, ok := msg.Metadata[OnDuplicateMetadataKey]; ok {
		policy = DuplicatePolicy(v)
	}
	code := policy.scriptCode()
	if code == "" {
		return "", &metadataError{key: OnDuplicateMetadataKey, value: string(policy), err: errors.New(`want "keep", "replace", "keep-earlier" or "keep-later"`)}
	}
	if hasWait {
		d, err := time.ParseDuration(wait)
		switch {
		case err != nil:
			return "", &metadataError{key: DebounceMaxWaitMetadataKey, value: wait, err: errors.New(`want a Go duration such as "30s"`)}
		case d < time.Microsecond:
			return "", &metadataError{key: DebounceMaxWaitMetadataKey, value: wait, err: errors.New("want at least 1µs")}
		case d > MaxDelay:
			return "", &metadataError{key: DebounceMaxWaitMetadataKey, value: wait, err: checkAhead(d)}
		case policy != KeepLater:
			return "", &metadataError{key: DebounceMaxWaitMetadataKey, value: wait, err: fmt.Errorf(`a debounce cap needs the %q duplicate policy, not %q`, KeepLater, policy)}
		}
		maxWait = d
	}
	if policy != KeepLater {
		maxWait = 0
	}
	return store.KeySpec(code, retention, maxWait, key), nil
}

// keyPartition is the partition of a key on a topic with the given number of partitions:
// FNV-1a of the key modulo partitions, as for PublisherConfig.PartitionKey.
func keyPartition(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}
