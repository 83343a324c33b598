package store

import (
	"errors"
	"fmt"
	"strconv"
)

// errors.go owns the errors the store returns: the sentinels that the root package re-exports
// under the same names (their doc comments are there), the two that only the root package
// branches on, and how an error quotes a name.

var (
	// ErrNotFound: a topic, consumer group, key or message does not exist.
	ErrNotFound = errors.New("not found")
	// ErrGroupRemoved: the consumer group a claim names was removed.
	ErrGroupRemoved = errors.New("consumer group was removed")
	// ErrNotDurable: stored, but not confirmed by enough replicas.
	ErrNotDurable = errors.New("not confirmed by enough replicas")
	// ErrOutcomeUnknown: the call may or may not have run.
	ErrOutcomeUnknown = errors.New("outcome unknown: the call may or may not have taken effect")
	// ErrRedisFull: Redis refused a write at maxmemory.
	ErrRedisFull = errors.New("redis is full (used memory reached maxmemory)")
)

// ErrRegistrationLost means a claim found its consumer group's registration gone with Redis's
// data (a restart without persistence, FLUSHALL, a failover to an empty replica), not removed:
// the subscription registers the group again. Nothing was acked or claimed.
var ErrRegistrationLost = errors.New("consumer group's registration lost with Redis's data")

// ErrLeaseLost means a script refused an operation because the caller's lease had expired and
// the message had been claimed again, or was cancelled (fencing). Nothing was changed.
var ErrLeaseLost = errors.New("lease lost")

// ErrTooLate means a fenced publishing call (Call.NotAfterUs) reached Redis after its fence;
// nothing was stored.
var ErrTooLate = errors.New("call reached Redis after its fence; nothing stored")

// StaleGroupsError means the caller's view of a topic partition's consumer groups was out of
// date; Groups are the ones registered now. Nothing was changed.
type StaleGroupsError struct{ Groups []string }

func (*StaleGroupsError) Error() string { return "registered consumer groups changed" }

// maxQuoted is how many bytes of a value an error message quotes, so that a huge UUID, name or
// metadata value does not make a huge error.
const maxQuoted = 64

// Quote quotes s for an error message: whole when it has at most maxQuoted bytes, else its first
// maxQuoted bytes, "..." and its length.
func Quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:maxQuoted], len(s))
}
