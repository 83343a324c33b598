package redisdelay

// This file owns the duplicate policies of message keys and their codes in the publish script.
// (ValidateKey is in names.go, the partition of a key in outgoing.go, WithKey and WithDebounce
// in metadata.go; options.go reads the key, its policy and its debounce cap, and builds the key
// spec.)

import (
	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// Message keys: a message can carry a business key ("order-42"), unique per topic while the
// message lives, by which it is deduplicated on publish and found again by the Inspector
// (Cancel, Reschedule, RunNow, Status), in O(log N) per consumer group.

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
