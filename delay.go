package redisdelay

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// MaxDelay is the longest delay Publish accepts. A longer one is rejected with a MessageError
// that names the metadata key; it is almost always a unit mistake.
const MaxDelay = 100 * 365 * 24 * time.Hour

// untilResolution is the resolution of _watermill_delayed_until: delay.Message formats it with
// time.RFC3339, which truncates to whole seconds. The exact instant the writer meant therefore
// lies in [until, until+untilResolution).
const untilResolution = time.Second

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
//   - only U: U - now, or 0 when U is in the past;
//   - both: (now + F) clamped into [U, U+1s), minus now; 0 when that is in the past.
//
// The last rule serves the two ways both keys reach a publisher. A fresh delay.For(d) or
// delay.Until(t) gives now+F ≥ the exact until ≥ U, so the message waits the full F, with
// millisecond precision, although U is truncated to whole seconds. A message re-published after
// its delay elapsed (a poison queue, a requeuer, a forwarder) still carries F, but now+F lies
// past U+1s, so it is due at once (never more than the 1 s truncation of U later than the
// original due time) instead of being delayed a second time.
//
// An unparseable value, or a delay above MaxDelay, is an error that names the key and the value.
func DelayOf(msg *message.Message, now time.Time) (time.Duration, error) {
	untilStr, forStr := msg.Metadata.Get(delay.DelayedUntilKey), msg.Metadata.Get(delay.DelayedForKey)
	var (
		until time.Time
		d     time.Duration
		err   error
	)
	if untilStr != "" {
		if until, err = time.Parse(time.RFC3339, untilStr); err != nil {
			return 0, &metadataError{key: delay.DelayedUntilKey, value: untilStr, err: errors.New("not an RFC3339 time")}
		}
	}
	if forStr != "" {
		if d, err = time.ParseDuration(forStr); err != nil {
			return 0, &metadataError{key: delay.DelayedForKey, value: forStr, err: errors.New("not a Go duration such as \"1m30s\"")}
		}
	}

	due := now
	switch {
	case untilStr == "" && forStr == "":
		return 0, nil
	case untilStr == "":
		due = now.Add(d)
	case forStr == "":
		due = until
	default:
		due = now.Add(d)
		if due.Before(until) {
			due = until
		}
		if latest := until.Add(untilResolution - time.Nanosecond); due.After(latest) {
			due = latest
		}
	}
	remaining := max(due.Sub(now), 0)
	if remaining > MaxDelay {
		key, value := delay.DelayedForKey, forStr
		if forStr == "" || (untilStr != "" && d <= MaxDelay) {
			key, value = delay.DelayedUntilKey, untilStr
		}
		return 0, &metadataError{key: key, value: value, err: fmt.Errorf("delay %s exceeds MaxDelay %s", remaining, MaxDelay)}
	}
	return remaining, nil
}

// metadataError is a problem with one metadata entry; Publish turns it into a MessageError.
type metadataError struct {
	key, value string
	err        error
}

func (e *metadataError) Error() string {
	return fmt.Sprintf("metadata %q=%q: %v", e.key, e.value, e.err)
}

func (e *metadataError) Unwrap() error { return e.err }
