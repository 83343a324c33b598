package redisdelaytest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/redisdelaytest"
)

// orders is the application under test: it places orders, schedules a payment check 30 minutes
// later keyed by the order, calls the check off when the order is paid, and cancels an order
// whose check comes due.
type orders struct {
	publisher message.Publisher
	inspector *redisdelay.Inspector
	mu        sync.Mutex
	status    map[string]string
}

func (o *orders) place(id string) error {
	o.mu.Lock()
	o.status[id] = "placed"
	o.mu.Unlock()
	check := redisdelay.WithKey(message.NewMessage(watermill.NewUUID(), []byte(id)), "order-"+id)
	check.SetContext(delay.WithContext(context.Background(), delay.For(30*time.Minute)))
	return o.publisher.Publish("order.payment-check", check)
}

func (o *orders) pay(id string) error {
	o.mu.Lock()
	o.status[id] = "paid"
	o.mu.Unlock()
	_, err := o.inspector.Cancel(context.Background(), "order.payment-check", redisdelay.ByKey("order-"+id))
	return err
}

func (o *orders) checkPayment(msg *message.Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if id := string(msg.Payload); o.status[id] == "placed" {
		o.status[id] = "cancelled"
	}
	return nil
}

func (o *orders) statusOf(id string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.status[id]
}

// exampleT stands in for the *testing.T of a real test.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// The order-timeout flow, tested in virtual time: order 1 is paid after 10 minutes, which
// cancels its 30-minute payment check; order 2 stays unpaid and is cancelled at exactly 30
// minutes. In a test, pass the *testing.T to redisdelaytest.New.
func Example_orderTimeout() {
	t := &exampleT{}
	defer t.done()

	q := redisdelaytest.New(t, redisdelaytest.Options{})
	app := &orders{publisher: q.Publisher(), inspector: q.Inspector(), status: map[string]string{}}
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddNoPublisherHandler("payment-check", "order.payment-check", q.Subscriber("order-service"), app.checkPayment)
	go func() { _ = router.Run(context.Background()) }()
	defer router.Close()
	<-router.Running()

	start := q.Now()
	_ = app.place("1")
	_ = app.place("2")
	q.RequireScheduled(t, "order.payment-check", "order-2", start.Add(30*time.Minute))

	q.Advance(10 * time.Minute)
	_ = app.pay("1")
	q.RequireCancelled(t, "order.payment-check", "order-1")

	q.Advance(20*time.Minute - time.Microsecond)
	fmt.Println("at 29m59.999999s, order 2 is", app.statusOf("2"))
	q.Advance(time.Microsecond)
	fmt.Println("at 30m, order 2 is", app.statusOf("2"))
	fmt.Println("order 1 is", app.statusOf("1"))
	for _, d := range q.Received("order-service") {
		fmt.Printf("check of %s delivered %s after the start\n", d.Key, d.At.Sub(start))
	}
	// Output:
	// at 29m59.999999s, order 2 is placed
	// at 30m, order 2 is cancelled
	// order 1 is paid
	// check of order-2 delivered 30m0s after the start
}
