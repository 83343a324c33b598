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
package clock

import "time"

// Clock tells the time. The zero value is the real clock.
type Clock struct {
	now func() time.Time
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
