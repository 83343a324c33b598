package redisdelay

import (
	"strconv"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// This file names where a message stands (State), the name results give parked messages
// (ParkedGroup) and what an operation did with a message (Outcome).
// Naming rule: each enum's constants start with the enum's name (State…, Outcome…), and their
// words are the ones the Inspector, the CLI's output and the dashboard's labels all print.

// State is where a message stands in one consumer group. It is what Inspector.List selects
// (StateScheduled, StateDue, StateInFlight, StateDeadLettered), what MessageInfo.State reports,
// and what Inspector.Status reports for a keyed message (every value but StateDue). Its value
// is the word the CLI and the dashboard print and accept (for example in
// `redisdelay list --state in-flight`).
type State string

const (
	// StateScheduled: due later. Inspector.Status reports a keyed message waiting in its group
	// as StateScheduled even once its due time has passed (KeyGroupStatus.DueAt says when), after
	// KeyGroupStatus.Attempt attempts.
	StateScheduled State = "scheduled"
	// StateDue: due now and not claimed (Inspector.List and MessageInfo only).
	StateDue State = "due"
	// StateInFlight: leased to a consumer, for attempt KeyGroupStatus.Attempt
	// (MessageInfo.Attempt) until KeyGroupStatus.LeaseDeadline (MessageInfo.LeaseDeadline).
	StateInFlight State = "in-flight"
	// StateDeadLettered: out of attempts and moved to the group's dead-letter topic. For List,
	// the group's dead letters that wait there (DefaultDeadLetterTopic) for a first consumer
	// group; for Status, moved at KeyGroupStatus.FinishedAt after KeyGroupStatus.Attempt
	// attempts, for KeyGroupStatus.Reason (DeadLetterReasonNacked or
	// DeadLetterReasonLeaseExpired).
	StateDeadLettered State = "dead-lettered"
	// StateAcked: acknowledged, on attempt KeyGroupStatus.Attempt, at KeyGroupStatus.FinishedAt
	// (Status only, while PublisherConfig.KeyRetention keeps the history).
	StateAcked State = "acked"
	// StateCancelled: cancelled by Inspector.Cancel at KeyGroupStatus.FinishedAt
	// (Status only, while PublisherConfig.KeyRetention keeps the history).
	StateCancelled State = "cancelled"
	// StateFinished: the group no longer holds the message, which other groups still do, and
	// keeps no history of it (PublisherConfig.KeyRetention was 0), or the group was registered
	// after the message was published (Status only).
	StateFinished State = "finished"
	// StateNotFound: nothing is known of a message with the key in the group (Status only).
	StateNotFound State = "not-found"
)

// listStates are the states Inspector.List and Inspector.Purge take.
var listStates = []State{StateScheduled, StateDue, StateInFlight, StateDeadLettered}

// Outcome is what an operation did with one message: Publisher.PublishWithResult, per message
// (OutcomeScheduled, OutcomeDuplicate, OutcomeReplaced), and the Inspector's operations by key
// or ref, per consumer group (OutcomeNotFound, OutcomeApplied, OutcomeInFlight,
// OutcomeFinished).
type Outcome int

const (
	// OutcomeScheduled: Publish stored and scheduled the message.
	OutcomeScheduled Outcome = iota + 1
	// OutcomeDuplicate: Publish found the message's key taken and stored nothing (see
	// DuplicatePolicy).
	OutcomeDuplicate
	// OutcomeReplaced: Publish replaced the message that had its key (see DuplicatePolicy).
	OutcomeReplaced
	// OutcomeNotFound: no message has the key or ref (never published, or done and its
	// history, if any, expired).
	OutcomeNotFound
	// OutcomeApplied: the operation took effect in the group (cancelled, rescheduled, made due
	// now).
	OutcomeApplied
	// OutcomeInFlight: a consumer of the group holds the message. Reschedule and RunNow leave it
	// as it is. Cancel cancels it all the same: a delivery the handler already has finishes,
	// but its Ack and Nack are refused as for a lost lease (logged at info level) and no Nack
	// or expired lease brings the message back; a message claimed but not yet handed to the
	// handler is handed out only if its subscription has not learned of the lost lease first
	// (fencing before hand-over), so it arrives at most once.
	OutcomeInFlight
	// OutcomeFinished: the group no longer holds the message: it acked, dead-lettered or
	// cancelled it already, or was registered after the message was published.
	OutcomeFinished
)

// String returns the outcome's word: "scheduled", "duplicate", "replaced", "not-found",
// "applied", "in-flight" or "finished".
func (o Outcome) String() string {
	switch o {
	case OutcomeScheduled:
		return "scheduled"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeReplaced:
		return "replaced"
	case OutcomeNotFound:
		return "not-found"
	case OutcomeApplied:
		return "applied"
	case OutcomeInFlight:
		return "in-flight"
	case OutcomeFinished:
		return "finished"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// outcomeOf names what the store reports it did with a message.
func outcomeOf(o store.Outcome) Outcome {
	switch o {
	case store.Scheduled:
		return OutcomeScheduled
	case store.Duplicate:
		return OutcomeDuplicate
	case store.Replaced:
		return OutcomeReplaced
	case store.Applied:
		return OutcomeApplied
	case store.InFlight:
		return OutcomeInFlight
	case store.Finished:
		return OutcomeFinished
	}
	return OutcomeNotFound
}

// String returns the state's word, as the CLI and the dashboard print it.
func (s State) String() string { return string(s) }

// ParkedGroup is the name under which results report messages published while no consumer group
// was registered on the topic: they wait, parked, for the first group that registers. Once a
// group is registered, the copy a topic keeps for groups that register within its new-group
// window (SubscriberConfig.NewGroupWindow) is not reported under it: it is no group's. Stats
// reports a topic with no group under it, and List, Message and Forecast take it as a group
// name for such a topic.
const ParkedGroup = ""
