package redisdelay

// This file owns deliver-by deadlines: a message's deadline, PublisherConfig.DeliverWithin, and
// what a consumer does with a message its group claims for its first attempt after its
// deadline (SubscriberConfig.OnExpired). (WithDeliverBy is in metadata.go; options.go reads and
// checks the deadline metadata.)

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// deadlineOf returns the deliver-by deadline of a message with options o, due at dueUs (Unix
// µs, Redis clock), in Unix µs on the Redis clock: the earlier of its deliver-by deadline and
// dueUs plus its DeliverWithin. ok is false when it has neither.
func deadlineOf(o received, dueUs int64) (deadlineUs int64, ok bool) {
	deadlineUs, ok = o.deliverByUs, o.hasDeliverBy
	if o.deliverWithin > 0 {
		if d := dueUs + o.deliverWithin.Microseconds(); !ok || d < deadlineUs {
			deadlineUs, ok = d, true
		}
	}
	return deadlineUs, ok
}

// expiredAtClaim reports whether a message with options o, claimed for attempt at claimedUs
// (Unix µs, Redis clock), expired: only a first attempt can (a retry was claimed in time
// before), and only when its group claimed it after its deadline (one claimed at the deadline
// is in time). A message claimed ahead of its due time (see claimAhead) is checked as of its due
// time, when it is handed out. It returns the deadline, and for a first attempt o.badDeadline, a
// deadline value that cannot be read and was ignored.
func expiredAtClaim(o received, attempt, dueUs, claimedUs int64) (deadlineUs int64, expired bool, err error) {
	if attempt != 1 {
		return 0, false, nil
	}
	deadlineUs, ok := deadlineOf(o, dueUs)
	return deadlineUs, ok && max(claimedUs, dueUs) > deadlineUs, o.badDeadline
}

// expireIfLate is the deadline check of delivery: it returns true when c, claimed for its first
// attempt after msg's deadline, was expired instead of handed out: dead-lettered with
// DeadLetterReasonExpired (the move logs and retries as deadLetter does) or dropped, as OnExpired
// says, and counted in expired_total. msg is the subscription's decoded copy, without delivery
// metadata, and c.opts its options.
func (s *partitionConsumer) expireIfLate(c *claimed, msg *message.Message) bool {
	deadlineUs, expired, err := expiredAtClaim(c.options(), c.Attempt, c.DueUs, c.claimedUs)
	if err != nil {
		s.logger.Error("Ignoring a deliver-by deadline that cannot be read", err, watermill.LogFields{"message_uuid": msg.UUID})
	}
	if !expired {
		return false
	}
	action := s.cfg.OnExpired
	if action == "" {
		action = ExpiryActionDeadLetter
	}
	s.logger.Info("Message expired: its group claimed it after its deliver-by deadline", watermill.LogFields{
		"message_uuid": msg.UUID,
		"deliver_by":   time.UnixMicro(deadlineUs).UTC().Format(deadlineLayout),
		"claimed_at":   time.UnixMicro(c.claimedUs).UTC().Format(deadlineLayout),
		"action":       string(action),
	})
	done := true // false when dead-lettering failed: the retry after the lease reports it
	if action == ExpiryActionDrop {
		s.book.acked(c)
	} else {
		done = s.deadLetter(c, msg, DeadLetterReasonExpired)
	}
	if m := s.cfg.Metrics; m != nil && done {
		m.Expired(s.topic, s.group, action)
	}
	return true
}

// validateDeliverWithin checks PublisherConfig.DeliverWithin.
func validateDeliverWithin(windows map[string]time.Duration) error {
	for topic, d := range windows {
		if d < time.Microsecond {
			return fmt.Errorf("redisdelay: PublisherConfig.DeliverWithin[%s] is %s, want at least 1µs", quote(topic), d)
		}
		if err := checkAhead(d); err != nil {
			return fmt.Errorf("redisdelay: PublisherConfig.DeliverWithin[%s] is %s: %w", quote(topic), d, err)
		}
	}
	return nil
}
