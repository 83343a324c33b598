package redisdelay_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
)

func TestDelayOfFollowsTheDocumentedRule(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 600_000_000, time.UTC) // .6 s past a whole second
	rfc := func(t time.Time) string { return t.Format(time.RFC3339) }
	cases := []struct {
		name        string
		until, for_ string
		want        time.Duration
	}{
		{name: "no metadata is due at once", want: 0},
		{name: "for alone", for_: "1.5s", want: 1500 * time.Millisecond},
		{name: "negative for is due at once", for_: "-3s", want: 0},
		{name: "until alone", until: rfc(now.Add(10 * time.Second)), want: 10*time.Second - 600*time.Millisecond},
		{name: "until alone in the past", until: rfc(now.Add(-time.Minute)), want: 0},
		{name: "until with offset", until: now.Add(5 * time.Second).In(time.FixedZone("CET", 3600)).Format(time.RFC3339), want: 5*time.Second - 600*time.Millisecond},
		{name: "fresh delay.For keeps full ms precision", until: rfc(now.Add(300 * time.Millisecond)), for_: "300ms", want: 300 * time.Millisecond},
		{name: "fresh sub-second delay whose until truncates below now", until: rfc(now.Add(250 * time.Millisecond)), for_: "250ms", want: 250 * time.Millisecond},
		{name: "fresh 30 minute delay", until: rfc(now.Add(30 * time.Minute)), for_: "30m0s", want: 30 * time.Minute},
		{name: "re-published long after its due time", until: rfc(now.Add(-time.Hour)), for_: "30m0s", want: 0},
		{name: "re-published just after its due time waits for the truncation at most", until: rfc(now.Add(-100 * time.Millisecond)), for_: "3s", want: 1100*time.Millisecond - 600*time.Millisecond},
		{name: "until later than for says", until: rfc(now.Add(time.Minute)), for_: "1s", want: time.Minute - 600*time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := message.NewMessage("m", nil)
			if c.until != "" {
				msg.Metadata.Set(delay.DelayedUntilKey, c.until)
			}
			if c.for_ != "" {
				msg.Metadata.Set(delay.DelayedForKey, c.for_)
			}
			got, err := redisdelay.DelayOf(msg, now)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestDelayOfFreshDelayIsNeverShorterThanRequested(t *testing.T) {
	// Whatever the sub-second phase of the clock, delay.For(d) published at once waits d.
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for phase := time.Duration(0); phase < time.Second; phase += 7 * time.Millisecond {
		for _, d := range []time.Duration{time.Millisecond, 99 * time.Millisecond, 999 * time.Millisecond, 1001 * time.Millisecond, 7 * time.Second} {
			now := base.Add(phase)
			msg := message.NewMessage("m", nil)
			msg.Metadata.Set(delay.DelayedUntilKey, now.Add(d).Format(time.RFC3339))
			msg.Metadata.Set(delay.DelayedForKey, d.String())
			got, err := redisdelay.DelayOf(msg, now.Add(50*time.Millisecond)) // published 50 ms later
			require.NoError(t, err)
			require.Equal(t, d, got, "phase %s delay %s", phase, d)
		}
	}
}

func TestDelayOfRejectsBadValuesNamingTheKey(t *testing.T) {
	now := time.Now()
	cases := []struct{ key, value string }{
		{delay.DelayedUntilKey, "tomorrow"},
		{delay.DelayedUntilKey, "2026-11-21 12:00:00"},
		{delay.DelayedForKey, "5 minutes"},
		{delay.DelayedForKey, "1000000h"},
		{delay.DelayedUntilKey, "2999-01-01T00:00:00Z"},
	}
	for _, c := range cases {
		msg := message.NewMessage("m", nil)
		msg.Metadata.Set(c.key, c.value)
		_, err := redisdelay.DelayOf(msg, now)
		require.Error(t, err, "%s=%s", c.key, c.value)
		assert.Contains(t, err.Error(), c.key)
		assert.Contains(t, err.Error(), c.value)
	}
}

// TestRepublishedMessageIsNeverDueAfterTheCapOnTheRedisClock checks the clamp's upper bound: a
// message that comes from elsewhere with both delay keys and a _watermill_delayed_for that
// reaches past _watermill_delayed_until + 1.1 s is due at that bound, measured on the Redis clock
// (its delivery's due time), however long the publish took to reach Redis.
func TestRepublishedMessageIsNeverDueAfterTheCapOnTheRedisClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		topic := newTopic()
		pub := newPublisher(t, b)
		sub := newSubscriber(t, b, nil)
		msgs := subscribe(t, sub, topic)

		// U lies 0-1 s ahead, so the cap U + 1.1 s is still ahead when the publishes arrive.
		until := time.Now().Truncate(time.Second).Add(time.Second)
		latest := until.Add(1100 * time.Millisecond)
		const n = 10
		for i := range n {
			msg := message.NewMessage(strconv.Itoa(i), nil)
			msg.Metadata.Set(delay.DelayedUntilKey, until.Format(time.RFC3339))
			msg.Metadata.Set(delay.DelayedForKey, "1h")
			require.NoError(t, pub.Publish(topic, msg))
		}
		for range n {
			msg := receive(t, msgs, 5*time.Second)
			due, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.DueTimeMetadataKey))
			require.NoError(t, err)
			assert.False(t, due.After(latest), "message %s due %s, after the cap %s", msg.UUID, due.Format(time.RFC3339Nano), latest.Format(time.RFC3339Nano))
			assert.False(t, due.Before(latest.Add(-10*time.Millisecond)), "message %s due %s, well before the cap %s: its delay was cut", msg.UUID, due.Format(time.RFC3339Nano), latest.Format(time.RFC3339Nano))
			msg.Ack()
		}
	})
}
