package redisdelaytest_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// delayed returns a message with key, due d after it is published.
func delayed(key string, d time.Duration) *message.Message {
	msg := message.NewMessage(key, []byte(key))
	delay.Message(msg, delay.For(d))
	return redisdelay.WithKey(msg, key)
}

func TestAdvanceDeliversAtTheVirtualDueTimeNeverEarlier(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	start := q.Now()
	q.Consume("orders", "billing")
	q.Publish(t, "orders", delayed("late", time.Hour), delayed("early", time.Minute))
	q.RequireScheduled(t, "orders", "early", start.Add(time.Minute))

	q.Advance(time.Minute - time.Microsecond)
	if got := q.Received("billing"); len(got) != 0 {
		t.Fatalf("received %v before its due time", got)
	}
	q.Advance(2 * time.Hour)
	got := q.Received("billing")
	if len(got) != 2 || got[0].Key != "early" || got[1].Key != "late" {
		t.Fatalf("received %+v, want early then late", got)
	}
	if !got[0].At.Equal(start.Add(time.Minute)) || !got[1].At.Equal(start.Add(time.Hour)) {
		t.Fatalf("handed out at %s and %s, want at their due times %s and %s", got[0].At, got[1].At, start.Add(time.Minute), start.Add(time.Hour))
	}
	if !q.Now().Equal(start.Add(2*time.Hour + time.Minute - time.Microsecond)) {
		t.Fatalf("clock at %s", q.Now())
	}
}
