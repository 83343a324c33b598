// Package clock is the client clock that Go code reads where it turns an instant into a delay
// on the Redis clock: the delay metadata of a published or nacked message. The zero Clock is
// the real clock, time.Now, at the cost of one nil check. Any other is virtual: there, a
// message with both of Watermill's delay keys is due its _watermill_delayed_for after now,
// since Watermill computes _watermill_delayed_until on the real clock (see scheduleOf in the
// root package).
//
// Waits stay on the real clock: a subscription's sleep, its heartbeat and its ack timer only
// decide when to ask Redis again, and Redis (its TIME, read by every script) decides what is
// due. The test kit (package redisdelaytest) runs Redis with a virtual clock and wakes the
// subscriptions itself whenever it moves that clock. SleepPrecisely ends such a wait on time.
//
// A virtual clock may watch Subscribers (Watched): a Subscriber made on a Publisher's clock
// (a schedule.Scheduler's, made through internal/seam) tells it when it is made, when each of
// its subscriptions starts and ends, and when it is closed, so that the test kit wakes and
// waits for that Subscriber too.
package clock

import "time"

// Clock tells the time. The zero value is the real clock.
type Clock struct {
	now func() time.Time
	// made, when not nil, is told of each Subscriber made on the clock.
	made func(group string) Watch
}

// Watch is what a Subscriber made on a watched clock tells of itself. The zero Watch tells
// nothing.
type Watch struct {
	// Subscribed is called when a subscription of topic starts, with the Subscriber's
	// partitions and lease; the func it returns is called when the subscription has ended.
	Subscribed func(topic string, partitions int, lease time.Duration) (ended func())
	// Closed is called when the Subscriber is closed.
	Closed func()
}

// Watched returns a Clock that reads now and calls made when a Subscriber of consumer group
// group is made on it (see Made).
func Watched(now func() time.Time, made func(group string) Watch) Clock {
	return Clock{now: now, made: made}
}

// Made returns the Watch of a Subscriber of group made on c: the zero Watch when c watches
// nothing.
func (c Clock) Made(group string) Watch {
	if c.made == nil {
		return Watch{}
	}
	return c.made(group)
}

// Subscription tells w that a subscription of topic starts and returns the func to call when
// it has ended (one that does nothing for the zero Watch).
func (w Watch) Subscription(topic string, partitions int, lease time.Duration) (ended func()) {
	if w.Subscribed == nil {
		return func() {}
	}
	return w.Subscribed(topic, partitions, lease)
}

// Close tells w that its Subscriber is closed.
func (w Watch) Close() {
	if w.Closed != nil {
		w.Closed()
	}
}

// Func returns a Clock that reads now.
func Func(now func() time.Time) Clock { return Clock{now: now} }

// Now returns the current time: time.Now for the zero Clock.
func (c Clock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// Inject, set by package redisdelay, sets the clock of a *redisdelay.Publisher or
// *redisdelay.Subscriber (before its first Publish or Subscribe) and reports whether target was
// one of them. It is the test kit's only way in: the root package has no public API for it.
var Inject func(target any, c Clock) bool

// Virtual reports whether c is not the real clock.
func (c Clock) Virtual() bool { return c.now != nil }
