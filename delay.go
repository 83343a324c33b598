package redisdelay

// This file owns the rule that turns Watermill's delay metadata into a due time (DelayOf,
// MaxDelay); options.go reads the metadata.

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// MaxDelay is the furthest ahead that anything may be scheduled: ten years of 365 days
// (87,600 h). It bounds every due time, cap and deadline a caller gives: a delay (Watermill's
// delay metadata, see DelayOf), a debounce cap (WithDebounce, DebounceMaxWaitMetadataKey,
// PublisherConfig.DebounceMaxWait), a batch's BatchConfig.MaxWait, a deliver-by deadline (WithDeliverBy, measured from the
// publishing client's clock; DeliverWithinMetadataKey, PublisherConfig.DeliverWithin), a new
// due time given to the Inspector (Reschedule, RescheduleAfter; measured from
// the client's clock) and the end of a schedule Backfill range (from the Redis clock). A value
// beyond it is almost always a unit mistake: it is refused before anything is stored, with an
// error wrapping ErrBeyondMaxDelay that names the value and the topic, and the message UUID,
// key or ref where there is one (a *MessageError from Publish).
const MaxDelay = 10 * 365 * 24 * time.Hour

// checkAhead refuses d, how far ahead a due time, cap or deadline lies, when it exceeds
// MaxDelay.
func checkAhead(d time.Duration) error {
	if d > MaxDelay {
		return fmt.Errorf("%w: %s ahead, more than MaxDelay %s", ErrBeyondMaxDelay, d, MaxDelay)
	}
	return nil
}

// untilResolution is the resolution of _watermill_delayed_until: delay.Message formats it with
// time.RFC3339, which truncates to whole seconds. The exact instant the writer meant therefore
// lies in [until, until+untilResolution).
const untilResolution = time.Second

// freshSlack is how long after delay.For or delay.Until a message may be published and still
// wait its full _watermill_delayed_for, measured from Publish.
const freshSlack = 100 * time.Millisecond

// DelayOf returns how long after now a message is due, from Watermill's delay metadata
// (components/delay). now is the publishing client's clock; the result is relative, and the
// Publisher adds it to the Redis server's clock (TIME inside the publish script), so the due time
// does not depend on clock skew between the client and Redis.
//
// With U = _watermill_delayed_until (RFC3339, any offset, fractional seconds allowed) and
// F = _watermill_delayed_for (a time.ParseDuration string):
//
//   - neither key: 0, due at once;
//   - only F: F (a negative F counts as 0);
//   - only U: U - now, or 0 when U is in the past. The Publisher schedules such a message at
//     the instant U itself, read on the Redis clock, so that messages naming the same instant
//     share a due time and come out in publish order;
//   - both: now + F, clamped into [U, U + 1.1s], minus now; 0 when that is in the past.
//
// The last rule serves the two ways both keys reach a publisher. For a fresh delay.For(d) or
// delay.Until(t), published within 100 ms of that call, now+F lies in the clamp range (the exact
// until lies in [U, U+1s) because RFC3339 truncates to whole seconds), so the message waits the
// full F after Publish, with millisecond precision. A message re-published after its delay
// elapsed (a poison queue, a requeuer, a forwarder) still carries F, but now+F lies past the
// range, so it waits at most until U + 1.1s: if that has passed it is due at once, and it is
// never delayed a second time. Clamping never makes a message due before the until it carries.
//
// A delivered message carries ServedDelayMetadataKey with the delay metadata its due time was
// computed from. While that metadata is unchanged, the delay has been served: DelayOf is 0 and
// a re-published message is due at once, within milliseconds, at every hop. A handler or
// middleware that sets a new delay changes the metadata, and the rules above apply to it.
//
// An unparseable value, or a delay above MaxDelay, is an error that names the key and the value.
func DelayOf(msg *message.Message, now time.Time) (time.Duration, error) {
	return delayOf(msg, now, false)
}

// scheduleOf applies the DelayOf rule to e, a message's metadata entries (see scan). A message
// with only _watermill_delayed_until is due at that absolute instant, read on the Redis clock,
// so that messages naming the same instant get the same due time and keep their publish order;
// it is returned as at. Otherwise at is zero and
// d is the delay relative to now. For a message with both keys, latest is the end of the clamp
// range, U + 1.1s: the publish script applies it on the Redis clock too, so that the time that
// passes between now and the script's run never carries the due time past it.
//
// On a virtual clock (the test kit, see internal/clock) a message with both keys is due F after
// now: Watermill's delay.For and delay.Until compute U on the real clock, which a virtual clock
// does not follow.
func scheduleOf(e entries, now time.Time, virtual bool) (d time.Duration, at, latest time.Time, err error) {
	untilStr, forStr := e.until, e.delayFor
	if e.has&hasServed != 0 && e.served == servedDelay(untilStr, forStr) {
		return 0, time.Time{}, time.Time{}, nil
	}
	until, d, err := parseDelayMetadata(untilStr, forStr)
	if err != nil {
		return 0, time.Time{}, time.Time{}, err
	}
	switch {
	case untilStr == "" && forStr == "":
		return 0, time.Time{}, time.Time{}, nil
	case untilStr == "":
		if d > MaxDelay {
			return 0, time.Time{}, time.Time{}, tooLong(delay.DelayedForKey, forStr, d)
		}
		return max(d, 0), time.Time{}, time.Time{}, nil
	case forStr == "":
		if remaining := until.Sub(now); remaining > MaxDelay {
			return 0, time.Time{}, time.Time{}, tooLong(delay.DelayedUntilKey, untilStr, remaining)
		}
		return 0, until, time.Time{}, nil
	case virtual:
		if d > MaxDelay {
			return 0, time.Time{}, time.Time{}, tooLong(delay.DelayedForKey, forStr, d)
		}
		return max(d, 0), time.Time{}, time.Time{}, nil
	}
	remaining, latest := clampToUntil(now, d, until)
	if remaining > MaxDelay {
		if d > MaxDelay {
			return 0, time.Time{}, time.Time{}, tooLong(delay.DelayedForKey, forStr, remaining)
		}
		return 0, time.Time{}, time.Time{}, tooLong(delay.DelayedUntilKey, untilStr, remaining)
	}
	return remaining, time.Time{}, latest, nil
}

// parseDelayMetadata parses Watermill's _watermill_delayed_until (RFC3339) and
// _watermill_delayed_for (a Go duration); an empty value gives the zero value.
func parseDelayMetadata(untilStr, forStr string) (until time.Time, d time.Duration, err error) {
	if untilStr != "" {
		if until, err = time.Parse(time.RFC3339, untilStr); err != nil {
			return until, 0, &metadataError{key: delay.DelayedUntilKey, value: untilStr, err: errors.New("not an RFC3339 time")}
		}
	}
	if forStr != "" {
		if d, err = time.ParseDuration(forStr); err != nil {
			return until, 0, &metadataError{key: delay.DelayedForKey, value: forStr, err: errors.New("not a Go duration such as \"1m30s\"")}
		}
	}
	return until, d, nil
}

// clampToUntil is the due time of a message with both delay keys, as a delay from now (never
// negative): now + d, but no earlier than until and no later than latest, until + 1.1s.
func clampToUntil(now time.Time, d time.Duration, until time.Time) (remaining time.Duration, latest time.Time) {
	due := now.Add(d)
	if due.Before(until) {
		due = until
	}
	latest = until.Add(untilResolution + freshSlack)
	if due.After(latest) {
		due = latest
	}
	return max(due.Sub(now), 0), latest
}

// tooLong is the error for a delay beyond MaxDelay, naming the metadata entry that asked for it.
func tooLong(key, value string, d time.Duration) error {
	return &metadataError{key: key, value: value, err: fmt.Errorf("delay: %w", checkAhead(d))}
}
