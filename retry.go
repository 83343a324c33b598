package redisdelay

// This file owns the nack decision: dead letter, the handler's own delay, or the backoff.

import (
	"bytes"
	"maps"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// nackDecision is what happens to a nacked message: it becomes a dead letter, or it is due
// again after delay, stored anew when the handler changed it.
type nackDecision struct {
	deadLetter bool
	delay      time.Duration // relative to the Redis clock at the time of the Nack
	changed    bool          // the handler changed UUID, payload or metadata: store the new version
	// badDelay is set when the handler set delay metadata that DelayOf refuses; delay is then
	// the backoff's.
	badDelay error
}

// decideNack decides the fate of a nacked message on its attempt-th delivery. kept is the
// options it was delivered with, original the message as stored (nil when it cannot be
// decoded), delivered the message as the handler left it, without the delivery metadata. In
// order:
//   - on the last attempt (maxAttempts, unless UnlimitedAttempts) it becomes a dead letter;
//   - if the handler changed the delay metadata (as middleware.DelayOnError does), the new
//     metadata decides the delay (see DelayOf, with now the Nack time, on a virtual clock when
//     virtual: see scheduleOf);
//   - otherwise backoff decides.
func decideNack(attempt int64, maxAttempts int, backoff Backoff, kept received, original, delivered *message.Message, now time.Time, virtual bool) nackDecision {
	if exhausted(attempt, maxAttempts) {
		return nackDecision{deadLetter: true}
	}
	d := nackDecision{delay: backoff.NackDelay(int(attempt))}
	if original == nil || sameMessage(original, delivered) {
		return d
	}
	d.changed = true
	switch wait, changed, err := redelay(kept, delivered, now, virtual); {
	case err != nil:
		d.badDelay = err
	case changed:
		d.delay = wait
	}
	return d
}

// exhausted reports whether a message that had attempt deliveries has used up maxAttempts.
func exhausted(attempt int64, maxAttempts int) bool {
	return maxAttempts != UnlimitedAttempts && attempt >= int64(maxAttempts)
}

func sameMessage(a, b *message.Message) bool {
	return a.UUID == b.UUID && bytes.Equal(a.Payload, b.Payload) && maps.Equal(a.Metadata, b.Metadata)
}
