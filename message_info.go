package redisdelay

// This file declares MessageInfo, what the Inspector reads of one message (List, Message) and
// what the files that build it (batch.go, marshaler.go, metadata.go, inspector_list.go) share.

import "time"

// MessageInfo describes one message of a consumer group. Times are on the Redis clock.
type MessageInfo struct {
	Topic, Group string
	// Ref names the message in its group, partition included, as text safe for URLs, JSON and
	// command lines. What takes it depends on the State List gave it (see Target):
	//   - StateScheduled, StateDue, StateInFlight (a batch and a message of the compact tier
	//     included): ByRef(group, ref), for Message, Status, Cancel, Reschedule,
	//     RescheduleAfter and RunNow; a parked message, listed under ParkedGroup, for Message
	//     and Status only;
	//   - StateDeadLettered: ByDeadLetter(group, ref) for Message, and Requeue.
	// ByRef looks only among the group's messages and ByDeadLetter only among its dead letters
	// (an error wrapping ErrNotFound when the ref names nothing there): one ref may name a
	// message of the group and one of its dead letters at once.
	Ref string
	// ID is the internal ID: 12 hex digits, then "=" and the key for a keyed message.
	ID   string
	UUID string
	// Key is the message's key, "" for none. A dead letter is stored without one: its Key is
	// the key it had (KeyMetadataKey), which operations by key no longer find.
	Key string
	// State is StateScheduled (DueAt may be past: due now), StateInFlight, or, for StateDeadLettered,
	// StateDeadLettered (DueAt is then when it was dead-lettered, on the Redis clock).
	State State
	DueAt time.Time // StateScheduled, StateDeadLettered
	// Attempt is the attempts so far (scheduled), the attempt under way (in flight), or the
	// attempts it had before it was dead-lettered (DeadLetterAttemptsMetadataKey; 0 for a
	// message published to the dead-letter topic without it).
	Attempt int
	// Reason is why a dead letter's last attempt failed (DeadLetterReasonMetadataKey, such as
	// DeadLetterReasonNacked); "" in the other states.
	Reason        string
	LeaseDeadline time.Time // StateInFlight
	Metadata      map[string]string
	PayloadSize   int
	// Preview is the payload's first PreviewLength bytes as text, with invalid UTF-8 and
	// control characters replaced by '.'.
	Preview string
	// Payload is the whole payload; only Message fills it.
	Payload []byte
	// Vanished is set when the stored message is missing (evicted): only the member is known.
	Vanished bool
	// Partial is set by List when the message's UUID and metadata are longer than the
	// ListReadBytes it reads of each message, or its Unmarshaler is not
	// DefaultMarshalerUnmarshaler and the message is longer than that: UUID and Metadata hold
	// what fitted (with a custom Unmarshaler, nothing), PayloadSize is the stored message's
	// size and Preview is empty. Message reads the whole message.
	Partial bool
}
