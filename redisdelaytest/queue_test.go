package redisdelaytest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

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

func TestALeaseHeldAcrossAnAdvanceIsKeptByTheHeartbeat(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{Subscriber: redisdelay.SubscriberConfig{LeaseTimeout: time.Minute}})
	msgs, err := q.Subscriber("workers").Subscribe(context.Background(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	q.Publish(t, "jobs", delayed("job", 0))
	msg := q.Receive(t, msgs)

	q.Consume("jobs", "workers") // a second consumer of the group, which takes expired leases
	q.Advance(10 * time.Minute)  // ten leases
	msg.Ack()
	q.Advance(time.Hour)

	got := q.Received("workers")
	if len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("received %+v, want one delivery, attempt 1: the lease must not expire while the handler runs", got)
	}
	st, err := q.Inspector().Stats(context.Background(), "jobs")
	if err != nil || len(st) != 1 || st[0].InFlight+st[0].Due+st[0].Scheduled != 0 {
		t.Fatalf("stats %+v, %v; want the message acked", st, err)
	}
}

func TestKeysCancelRescheduleAndRunNowFollowTheVirtualClock(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	start := q.Now()
	q.Consume("reminders", "mailer")
	q.Publish(t, "reminders", delayed("cancel-me", time.Hour), delayed("later", time.Hour), delayed("now", time.Hour))
	ctx := context.Background()
	if _, err := q.Inspector().Cancel(ctx, "reminders", redisdelay.ByKey("cancel-me")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Inspector().RescheduleAfter(ctx, "reminders", redisdelay.ByKey("later"), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Inspector().RunNow(ctx, "reminders", redisdelay.ByKey("now")); err != nil {
		t.Fatal(err)
	}
	q.Settle()
	if d := q.RequireReceived(t, "reminders", "mailer", "now"); !d.At.Equal(start) {
		t.Fatalf("run-now message handed out at %s, want %s", d.At, start)
	}
	q.RequireCancelled(t, "reminders", "cancel-me")
	q.RequireScheduled(t, "reminders", "later", start.Add(2*time.Hour))

	q.Advance(2*time.Hour - time.Microsecond)
	q.RequireNotReceived(t, "reminders", "mailer", "later")
	q.Advance(time.Microsecond)
	if d := q.RequireReceived(t, "reminders", "mailer", "later"); !d.At.Equal(start.Add(2 * time.Hour)) {
		t.Fatalf("rescheduled message handed out at %s, want %s", d.At, start.Add(2*time.Hour))
	}
	q.RequireNotReceived(t, "reminders", "mailer", "cancel-me")
}

func TestABatchIsReleasedAtMaxWaitOnTheVirtualClock(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{Publisher: redisdelay.PublisherConfig{
		Batching: map[string]redisdelay.BatchConfig{"parcels": {MaxItems: 100, MaxWait: 5 * time.Minute}},
	}})
	start := q.Now()
	q.Consume("parcels", "courier")
	for _, id := range []string{"p1", "p2", "p3"} {
		q.Publish(t, "parcels", redisdelay.WithBatchKey(message.NewMessage(id, []byte(id)), "depot-7"))
	}
	q.Advance(5*time.Minute - time.Microsecond)
	if got := q.Received("courier"); len(got) != 0 {
		t.Fatalf("batch released before MaxWait: %+v", got)
	}
	q.Advance(time.Microsecond)
	got := q.Received("courier")
	if len(got) != 1 || !got[0].At.Equal(start.Add(5*time.Minute)) {
		t.Fatalf("received %+v, want one batch at %s", got, start.Add(5*time.Minute))
	}
	items, err := redisdelay.UnpackBatch(got[0].Message(), nil)
	if err != nil || len(items) != 3 {
		t.Fatalf("batch holds %d items (%v), want 3", len(items), err)
	}
}

func TestNackBackoffAndDeadLettersFollowTheVirtualClock(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{Subscriber: redisdelay.SubscriberConfig{
		MaxAttempts: 3,
		NackBackoff: redisdelay.ExponentialBackoff{InitialInterval: time.Minute, MaxInterval: time.Hour, Multiplier: 2},
	}})
	start := q.Now()
	q.Handle("payments", "charger", func(*message.Message) error { return errors.New("card declined") })
	q.Consume(redisdelay.DefaultDeadLetterTopic("payments", "charger"), "ops")
	q.Publish(t, "payments", delayed("pay-1", 0))

	q.Advance(3*time.Minute - time.Microsecond)
	if got := q.Received("ops"); len(got) != 0 {
		t.Fatalf("dead-lettered before the third attempt: %+v", got)
	}
	q.Advance(time.Microsecond)
	got := q.Received("charger")
	want := []time.Time{start, start.Add(time.Minute), start.Add(3 * time.Minute)}
	if len(got) != len(want) {
		t.Fatalf("received %+v, want attempts at %v", got, want)
	}
	for i, d := range got {
		if d.Attempt != i+1 || !d.At.Equal(want[i]) {
			t.Fatalf("attempt %d at %s, want attempt %d at %s", d.Attempt, d.At, i+1, want[i])
		}
	}
	if dead := q.RequireReceived(t, redisdelay.DefaultDeadLetterTopic("payments", "charger"), "ops", "pay-1"); !dead.At.Equal(start.Add(3 * time.Minute)) {
		t.Fatalf("dead letter handed out at %s, want %s", dead.At, start.Add(3*time.Minute))
	}
}

func TestAHandlerThatPublishesWithADelayIsServedAtTheRightStop(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	start := q.Now()
	q.Handle("step", "chain", func(msg *message.Message) error {
		if n := len(msg.Payload); n < 3 {
			next := message.NewMessage(watermill.NewUUID(), append(msg.Payload, '+'))
			delay.Message(next, delay.For(10*time.Minute))
			return q.Publisher().Publish("step", next)
		}
		return nil
	})
	q.Publish(t, "step", message.NewMessage(watermill.NewUUID(), []byte("+")))
	q.Advance(time.Hour)
	got := q.Received("chain")
	if len(got) != 3 {
		t.Fatalf("received %d steps, want 3", len(got))
	}
	for i, d := range got {
		if want := start.Add(time.Duration(i) * 10 * time.Minute); !d.At.Equal(want) {
			t.Fatalf("step %d handed out at %s, want %s", i+1, d.At, want)
		}
	}
}

func TestAdvanceFailsNamingWhatIsPendingWhenNobodyReads(t *testing.T) {
	ft := &fakeT{}
	q := redisdelaytest.New(ft, redisdelaytest.Options{SettleTimeout: 200 * time.Millisecond})
	defer ft.cleanup()
	if _, err := q.Subscriber("idle").Subscribe(context.Background(), "unread"); err != nil {
		t.Fatal(err)
	}
	q.Publish(ft, "unread", delayed("k", time.Minute))
	func() {
		defer func() { _ = recover() }()
		q.Advance(time.Minute)
	}()
	if !strings.Contains(ft.failure, `group "idle" on topic "unread"`) {
		t.Fatalf("failure %q does not name the group and topic", ft.failure)
	}
}

// fakeT records a failure and stops the calling function, as t.Fatalf does.
type fakeT struct {
	failure  string
	cleanups []func()
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	panic(f.failure)
}
func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestAssertionFailuresNameTopicGroupKeyAndDueTime(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	q.Consume("orders", "billing")
	q.Publish(t, "orders", delayed("order-7", time.Hour))
	due := q.Now().Add(time.Hour).Format(time.RFC3339Nano)

	for name, tc := range map[string]struct {
		assert func(redisdelaytest.TB)
		want   []string
	}{
		"scheduled at another time": {
			func(ft redisdelaytest.TB) { q.RequireScheduled(ft, "orders", "order-7", q.Now()) },
			[]string{`key "order-7" on topic "orders"`, `group "billing": scheduled at ` + due},
		},
		"not cancelled": {
			func(ft redisdelaytest.TB) { q.RequireCancelled(ft, "orders", "order-7") },
			[]string{`key "order-7" on topic "orders"`, `group "billing": scheduled at ` + due},
		},
		"not received": {
			func(ft redisdelaytest.TB) { q.RequireReceived(ft, "orders", "billing", "order-7") },
			[]string{`group "billing"`, `key "order-7" on topic "orders"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ft := &fakeT{}
			func() {
				defer func() { _ = recover() }()
				tc.assert(ft)
			}()
			for _, w := range tc.want {
				if !strings.Contains(ft.failure, w) {
					t.Errorf("failure %q does not contain %q", ft.failure, w)
				}
			}
		})
	}
	q.Advance(time.Hour)
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		q.RequireNotReceived(ft, "orders", "billing", "order-7")
	}()
	if !strings.Contains(ft.failure, `group "billing" received key "order-7" on topic "orders"`) || !strings.Contains(ft.failure, "due "+due) {
		t.Errorf("failure %q does not name group, key, topic and due time", ft.failure)
	}
}

func TestADelaySetBeforeNackIsServedOnTheVirtualClock(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	start := q.Now()
	q.Handle("webhooks", "sender", func(msg *message.Message) error {
		if msg.Metadata.Get(redisdelay.AttemptMetadataKey) == "1" {
			delay.Message(msg, delay.For(5*time.Minute)) // as middleware.DelayOnError does
			return errors.New("endpoint down")
		}
		return nil
	})
	q.Publish(t, "webhooks", delayed("hook-1", 0))
	q.Advance(time.Hour)
	got := q.Received("sender")
	if len(got) != 2 || !got[1].At.Equal(start.Add(5*time.Minute)) {
		t.Fatalf("received %+v, want the retry at %s", got, start.Add(5*time.Minute))
	}
}

// TestQueueLayoutMakesComponentsOfTheSameQueue: a Subscriber made from the Queue's Layout
// receives what the Queue's Publisher publishes.
func TestQueueLayoutMakesComponentsOfTheSameQueue(t *testing.T) {
	q := redisdelaytest.New(t, redisdelaytest.Options{})
	layout := q.Layout()
	require.Equal(t, q.Client(), layout.Client)
	require.Equal(t, redisdelay.DefaultKeyPrefix, layout.KeyPrefix)
	sub, err := redisdelay.NewSubscriber(layout.SubscriberConfig("billing"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	q.Publish(t, "orders", message.NewMessage("order-1", []byte("due now")))
	select {
	case m := <-msgs:
		require.Equal(t, "order-1", m.UUID)
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the Subscriber made from the Queue's Layout received nothing within 10 s")
	}
}
