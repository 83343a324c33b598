package redisdelay

// This file owns dead-letter topics: their names (DefaultDeadLetterTopic) and moving a
// message that ran out of attempts to its group's dead-letter topic.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// DefaultDeadLetterTopic returns topic + DeadLetterInfix + group, for example
// "orders.dead-letter.billing". Dead letters are ordinary messages on that topic: subscribe to
// it to handle them. Any other valid topic name works as a dead-letter topic too (see
// SubscriberConfig.DeadLetterTopic).
func DefaultDeadLetterTopic(topic, group string) string {
	return topic + DeadLetterInfix + group
}

// deadLetterTopic returns the dead-letter topic of the subscription's topic and group, checking
// that it is a valid topic name other than the topic itself.
func (s *Subscriber) deadLetterTopic(topic string) (string, error) {
	dlt := s.config.DeadLetterTopic(topic, s.config.ConsumerGroup)
	if err := ValidateName("dead-letter topic", dlt); err != nil {
		return "", err
	}
	if dlt == topic {
		return "", fmt.Errorf("redisdelay: %w: dead-letter topic of topic %s is the topic itself", ErrInvalidName, quote(topic))
	}
	return dlt, nil
}

// deadLetter moves letter, a message that ran out of attempts or expired, to the dead-letter
// topic with the metadata that says why, and reports whether it was moved. letter must be the
// subscription's own copy, without delivery metadata: its metadata is changed in place. The
// letter loses its deliver-by deadline (DeliverByMetadataKey, DeliverWithinMetadataKey), so
// that the dead-letter topic's groups and a Requeue deliver it. If the move fails, the message
// keeps its lease and is dead-lettered on its next claim, after the lease expired (an expired
// message is then delivered: its next claim is no first attempt).
func (s *partitionConsumer) deadLetter(c *claimed, letter *message.Message, reason string) bool {
	key, keyed := store.KeyOf(c.ID)
	setDeadLetterMetadata(letter, s.topic, s.group, min(c.Attempt, int64(s.cfg.MaxAttempts)), reason, key, keyed)
	fields := watermill.LogFields{"message_uuid": letter.UUID, "attempt": c.Attempt, "reason": reason, "dead_letter_topic": s.deadLetterTopic}

	data, err := s.cfg.Marshaler.Marshal(s.deadLetterTopic, letter)
	if err != nil {
		s.logger.Error("Cannot marshal dead letter; it stays in the group until its lease expires", err, fields)
		return false
	}
	ctx, cancel := s.callContext()
	defer cancel()
	err = s.deadLetterGroups.withGroups(ctx, s.deadLetterPart, func(ctx context.Context, groups []string) error {
		return s.store.DeadLetter(ctx, s.part, s.epoch, c.Lease, reason, s.deadLetterPart, groups, data, s.cfg.LeaseTimeout)
	})

	switch {
	case errors.Is(err, store.ErrLeaseLost):
		s.logger.Info("Dead-lettering refused: the lease had expired and the message was claimed again", fields)
	case err != nil && s.ctx.Err() != nil:
		s.logger.Debug("Dead-lettering cut short by the end of the subscription; the message is retried after its lease expires", fields)
	case err != nil:
		s.logger.Error("Dead-lettering failed; the message is retried after its lease expires", err, fields)
	default:
		if m := s.cfg.Metrics; m != nil {
			m.DeadLettered(s.topic, s.group, reason)
		}
		s.logger.Info("Message moved to the dead-letter topic", fields)
		return true
	}
	return false
}

// deadLettered marks m, read from a dead-letter topic's parked set, as a dead letter, with the
// attempts, reason and key that dead-lettering wrote into its metadata. Its DueAt, the score
// there, is when it was moved: dead-lettering publishes it due at once.
func deadLettered(m *MessageInfo) {
	m.State = StateDeadLettered
	reason, key, attempts, ok := deadLetterOf(m.Metadata)
	m.Reason = reason
	if m.Key == "" {
		m.Key = key
	}
	if ok {
		m.Attempt = attempts
	}
}
