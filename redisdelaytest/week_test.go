package redisdelaytest_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// TestAWeekOfTenThousandMessagesIsDeliveredInDueOrder advances a week over 10,000 messages
// spread at random over it: each is handed out once, in due order, within Resolution after its
// due time, never before it.
func TestAWeekOfTenThousandMessagesIsDeliveredInDueOrder(t *testing.T) {
	const n = 10000
	const week = 7 * 24 * time.Hour
	const resolution = time.Hour
	q := redisdelaytest.New(t, redisdelaytest.Options{Resolution: resolution})
	start := q.Now()
	q.Consume("reminders", "mailer")
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprint(i), nil)
		delay.Message(msgs[i], delay.For((time.Duration(rng.Int64N(int64(week))) + time.Second).Truncate(time.Microsecond)))
	}
	for i := 0; i < n; i += 1000 {
		q.Publish(t, "reminders", msgs[i:i+1000]...)
	}

	began, cmds := time.Now(), q.Miniredis().CommandCount()
	q.Advance(week + time.Second)
	t.Logf("advanced a week over %d messages in %s of wall time, %d commands", n, time.Since(began), q.Miniredis().CommandCount()-cmds)

	got := q.Received("mailer")
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	seen := map[string]bool{}
	for i, d := range got {
		if seen[d.UUID] {
			t.Fatalf("message %s received twice", d.UUID)
		}
		seen[d.UUID] = true
		if d.At.Before(d.DueAt) || d.At.Sub(d.DueAt) >= resolution {
			t.Fatalf("message %s handed out at %s, due at %s", d.UUID, d.At, d.DueAt)
		}
		if i > 0 && d.DueAt.Before(got[i-1].DueAt) {
			t.Fatalf("message %s (due %s) handed out after %s (due %s)", d.UUID, d.DueAt, got[i-1].UUID, got[i-1].DueAt)
		}
		if d.DueAt.Before(start) || d.DueAt.After(start.Add(week+time.Second)) {
			t.Fatalf("message %s due at %s, outside the week", d.UUID, d.DueAt)
		}
	}
}
