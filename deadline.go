package redisdelay

// This file owns deliver-by deadlines: WithDeliverBy, the checks Publish applies to the deadline
// metadata, PublisherConfig.DeliverWithin, and what a consumer does with a message its group
// claims for its first attempt after its deadline (SubscriberConfig.OnExpired).

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ExpiryAction is what a consumer group does with a message it claims for its first attempt
// after the message's deliver-by deadline (SubscriberConfig.OnExpired).
type ExpiryAction string

const (
	// ExpiryActionDeadLetter moves an expired message to the group's dead-letter topic with
	// DeadLetterReasonExpired. It is the default (the zero value means it).
	ExpiryActionDeadLetter ExpiryAction = "dead-letter"
	// ExpiryActionDrop acknowledges an expired message without handing it out: the group is
	// done with it, as if a handler had acked it (Inspector.Status reports it acked).
	ExpiryActionDrop ExpiryAction = "drop"
)

// valid reports whether a is an ExpiryAction the Subscriber knows, "" included.
func (a ExpiryAction) valid() bool {
	return a == "" || a == ExpiryActionDeadLetter || a == ExpiryActionDrop
}

// deadlineLayout formats DeliverByMetadataKey: RFC 3339 with microseconds, the precision of
// due times and of the Redis clock the deadline is compared with.
const deadlineLayout = dueTimeLayout

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

// checkDeadlines refuses deadline metadata that a consumer could not read, or that lies more
// than MaxDelay after now (the publishing client's clock), naming the key and its value.
func checkDeadlines(msg *message.Message, now time.Time) *metadataError {
	if v, ok := msg.Metadata[DeliverByMetadataKey]; ok {
		us, err := parseDeliverBy(v)
		if err == nil {
			err = checkAhead(time.UnixMicro(us).Sub(now))
		}
		if err != nil {
			return &metadataError{key: DeliverByMetadataKey, value: v, err: err}
		}
	}
	if v, ok := msg.Metadata[DeliverWithinMetadataKey]; ok {
		d, err := parseDeliverWithin(v)
		if err == nil {
			err = checkAhead(d)
		}
		if err != nil {
			return &metadataError{key: DeliverWithinMetadataKey, value: v, err: err}
		}
	}
	return nil
}

// hasDeadline reports whether msg carries either deadline key.
func hasDeadline(msg *message.Message) bool {
	_, by := msg.Metadata[DeliverByMetadataKey]
	_, within := msg.Metadata[DeliverWithinMetadataKey]
	return by || within
}

// withDeliverWithin returns msg, or, when window is positive and msg has no deadline of its own,
// a copy of it (context included) with DeliverWithinMetadataKey set to window: Publish never
// changes the caller's message.
func withDeliverWithin(msg *message.Message, window time.Duration) *message.Message {
	if window <= 0 || hasDeadline(msg) {
		return msg
	}
	c := msg.Copy()
	c.Metadata.Set(DeliverWithinMetadataKey, window.String())
	c.SetContext(msg.Context())
	return c
}

// deadlineOf returns the deliver-by deadline of a message stored with metadata md and due at
// dueUs (Unix µs, Redis clock), in Unix µs on the Redis clock: the earlier of
// DeliverByMetadataKey and dueUs plus DeliverWithinMetadataKey. ok is false when md has neither
// key; err names a value that cannot be read (Publish refuses those, so only a message stored
// by other means has one), whose deadline is then ignored.
func deadlineOf(md message.Metadata, dueUs int64) (deadlineUs int64, ok bool, err error) {
	if v, has := md[DeliverByMetadataKey]; has {
		by, perr := parseDeliverBy(v)
		if perr != nil {
			err = &metadataError{key: DeliverByMetadataKey, value: v, err: perr}
		} else {
			deadlineUs, ok = by, true
		}
	}
	if v, has := md[DeliverWithinMetadataKey]; has {
		within, perr := parseDeliverWithin(v)
		if perr != nil {
			err = errors.Join(err, &metadataError{key: DeliverWithinMetadataKey, value: v, err: perr})
		} else if d := dueUs + within.Microseconds(); !ok || d < deadlineUs {
			deadlineUs, ok = d, true
		}
	}
	return deadlineUs, ok, err
}

// expiredAtClaim reports whether a message claimed for attempt at claimedUs (Unix µs, Redis
// clock) expired: only a first attempt can (a retry was claimed in time before), and only when
// its group claimed it after its deadline (one claimed at the deadline is in time). It returns
// the deadline, and deadlineOf's error.
func expiredAtClaim(md message.Metadata, attempt, dueUs, claimedUs int64) (deadlineUs int64, expired bool, err error) {
	if attempt != 1 {
		return 0, false, nil
	}
	deadlineUs, ok, err := deadlineOf(md, dueUs)
	return deadlineUs, ok && claimedUs > deadlineUs, err
}

// expireIfLate is the deadline check of delivery: it returns true when c, claimed for its first
// attempt after msg's deadline, was expired instead of handed out: dead-lettered with
// DeadLetterReasonExpired (the move logs and retries as deadLetter does) or dropped, as OnExpired
// says, and counted in expired_total. msg is the subscription's decoded copy, without delivery
// metadata.
func (s *partitionConsumer) expireIfLate(c *claimed, msg *message.Message) bool {
	deadlineUs, expired, err := expiredAtClaim(msg.Metadata, c.Attempt, c.DueUs, c.claimedUs)
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
