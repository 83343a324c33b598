// Package redisdelaytest is a test kit for code that uses redisdelay: an embedded queue with a
// virtual clock, so that a test of a 30-minute or 48-hour timeout runs in milliseconds.
//
// New gives a test, in one call, an in-process Redis (miniredis), a Publisher, an Inspector and
// a Subscriber per consumer group, all closed by t.Cleanup. The Publisher is a
// *redisdelay.Publisher and each Subscriber a message.Subscriber, so a message.Router or a CQRS
// processor runs on them unchanged.
//
//	q := redisdelaytest.New(t, redisdelaytest.Options{})
//	router.AddNoPublisherHandler("check", "order.payment-check", q.Subscriber("orders"), handle)
//	// ... run the router, publish with delay.For(30*time.Minute) ...
//	q.Advance(30 * time.Minute)
//	q.RequireReceived(t, "order.payment-check", "orders", "order-42")
//
// # The virtual clock
//
// The clock starts at Options.Start (DefaultStart when zero) and moves only when the test calls
// Advance or AdvanceTo. It is miniredis's clock (SetTime, with ClockTTL so that key retention
// expires on it too), and since every redisdelay script reads the time with Redis TIME, due
// times, leases, nack backoff, batch MaxWait and key retention all follow it. Nothing is ever
// due before its virtual due time.
//
// The client side reads the virtual clock where it turns an instant into a delay: the
// Publisher and the Subscribers get it through an internal hook (internal/clock), so the
// production path keeps time.Now behind one nil check and the root package gains no public
// API. On that clock, a message with both of Watermill's delay keys (delay.For and
// delay.Until set both) is due _watermill_delayed_for after now: Watermill computes
// _watermill_delayed_until on the real clock, which the virtual clock does not follow. To
// schedule at an instant t of the virtual clock, use delay.For(t.Sub(q.Now())).
//
// Client-side waits (a subscription's sleep until the next due time, its heartbeat, its ack
// timer) stay on the real clock: they only decide when to ask Redis again. Instead, each time
// the kit moves the clock it sends a "check now" on the wake channel of every running
// subscription, which makes a sleeping one claim at once and a busy one extend its leases.
//
// # When Advance returns
//
// AdvanceTo stops at every due time on the way (the earliest due time of a group with a running
// subscription, read from Redis; with Options.Resolution, the next multiple of it), so a
// handler runs with the clock at its message's due time and a message it publishes with a
// delay falls due at the right stop. At each stop it waits
// until the queue is settled: for each consumer group with a running subscription of the kit,
// nothing is due and nothing is in flight. So when Advance returns, every message due by the
// new time has been claimed, in due order, handed to the application, and acked or nacked (a
// nack's retry, when due by then, too). Settle does the same without moving the clock.
//
// A test that wants to hold a message across an advance takes it with Receive. Until it acks or
// nacks it, the message's consumer group is busy, as it would be in production: what falls due
// for it waits for the ack, and the advance does not wait for it. Its leases are kept: the
// stops are then at most a third of its LeaseTimeout apart, and at each the kit waits until the
// subscription has extended every lease it holds to a whole lease from the new time. So a
// handler still running when the test advances past its lease keeps its message. Any other
// message handed out is waited for, like a handler's, until it is acked or nacked.
//
// Advance waits for the application to take and finish what falls due, so read the channels in
// another goroutine than the one that calls Advance: a message.Router, a CQRS processor, or
// Queue.Handle and Queue.Consume. A group that does not finish within Options.SettleTimeout of
// wall time fails the test with what is pending, by topic and group.
//
// # Schedules
//
// A schedule.Scheduler made on the Queue's Publisher (schedule.New(schedule.Config{Publisher:
// q.Publisher()}, nil), then go sched.Run(ctx)) runs on the virtual clock: its subscription of
// the tick topic counts as a running group, so AdvanceTo stops at each tick, wakes it, and
// returns once it has acted on every tick due by then and the messages it published were handed
// out and finished. schedule.New tells the Queue of the Scheduler, and Advance and Settle wait
// for its Run to subscribe while no other Scheduler runs (failing after SettleTimeout if none
// does). The kit makes no Scheduler itself and does not import package schedule. See
// Example_schedule.
//
// # Assertions
//
// RequireScheduled, RequireCancelled, RequireReceived and RequireNotReceived fail the test with
// a message that names the topic, the group, the key and the due times found; Received and
// Scheduled return what a group received and what is scheduled for it.
//
// # Cost
//
// A stop costs a few script calls on miniredis, whose sorted sets are sorted on every range
// query: about 2 ms a stop with a thousand messages scheduled, 12 ms with ten thousand. A test
// that advances over thousands of distinct due times takes seconds to minutes; Options.Resolution
// trades the exact instant of each hand-off for fewer stops.
package redisdelaytest
