package redisdelaytest

// This file lets the Queue drive the schedule.Schedulers made on its Publisher. A Scheduler
// consumes the tick topic through a Subscriber it makes from its Publisher (internal/seam),
// on the Publisher's clock: the Queue's clock watches such Subscribers (internal/clock's
// Watched), so the Queue counts their subscriptions as running groups, wakes them at each stop
// and waits for them to settle, as it does for its own Subscribers. The kit makes no Scheduler
// itself and does not import package schedule, so a test of the kit does not build the cron
// parser unless it uses schedules.

import (
	"fmt"
	"slices"
	"time"

	"github.com/watermill-redisdelay/redisdelay/internal/clock"
)

// watch is told of each Subscriber of group made on the Queue's Publisher: from then until its
// first subscription starts or it is closed, it is starting, and settle waits for it while no
// other subscription of its group runs; each of its subscriptions is a running subscription of
// its group.
func (q *Queue) watch(group string) clock.Watch {
	q.mu.Lock()
	q.starting[group]++
	q.mu.Unlock()
	started := false // guarded by q.mu
	start := func() {
		q.mu.Lock()
		if !started {
			started = true
			if q.starting[group]--; q.starting[group] == 0 {
				delete(q.starting, group)
			}
		}
		q.mu.Unlock()
		q.notify()
	}
	return clock.Watch{
		Subscribed: func(topic string, partitions int, lease time.Duration) func() {
			g := q.subscribed(topic, group, partitions, lease)
			start()
			return func() {
				q.unsubscribed(g)
				q.notify()
			}
		},
		Closed: start,
	}
}

// notSubscribed describes the consumer groups of the Subscribers made on the Publisher that
// have not subscribed yet, when no other Subscriber of the group runs: one line per group. (A
// Scheduler made only to put schedules, next to one that runs, is not waited for.)
func (q *Queue) notSubscribed() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	running := map[string]bool{}
	for _, g := range q.groups {
		running[g.group] = running[g.group] || g.running > 0
	}
	var out []string
	for group, n := range q.starting {
		if !running[group] {
			out = append(out, fmt.Sprintf("%d Subscriber(s) of consumer group %q made on the Queue's Publisher have not subscribed yet, and none of the group runs (a schedule.Scheduler: run it, go sched.Run(ctx), or close it)", n, group))
		}
	}
	slices.Sort(out)
	return out
}
