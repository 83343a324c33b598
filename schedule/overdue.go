package schedule

// This file owns the overdue mark of Info: a pending tick that no Scheduler acted on within a
// lease, and the reason in words, from one page of the Schedulers' worker records.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/watermill-redisdelay/redisdelay"
)

// overdueWorkersPage is how many Scheduler records one List or Get reads to explain an overdue
// tick: enough to count the Schedulers of any deployment, and one bounded page.
const overdueWorkersPage = 100

// markOverdue sets Overdue and OverdueReason on the infos whose pending tick fell due more than
// a lease before now (the Redis clock); a Scheduler counts as running while its record shows its
// subscription to TickTopic (Run runs). It reads the Schedulers' records only when a pending
// tick is at least DefaultLeaseTimeout past due, so that a listing with nothing late costs
// nothing more.
func markOverdue(ctx context.Context, in *redisdelay.Inspector, infos []Info, now time.Time) error {
	late := false
	for _, info := range infos {
		late = late || pastDue(info, now, DefaultLeaseTimeout)
	}
	if !late {
		return nil
	}
	page, err := in.Workers(ctx, redisdelay.WorkersOptions{Kind: redisdelay.WorkerScheduler, Limit: overdueWorkersPage})
	if err != nil {
		return fmt.Errorf("read the Schedulers' worker records: %w", err)
	}
	lease, running := DefaultLeaseTimeout, 0
	for _, w := range page.Workers {
		if slices.Contains(w.Subscriptions, redisdelay.WorkerSubscription{Topic: TickTopic, Group: TickGroup}) {
			lease, running = max(lease, w.LeaseTimeout), running+1
		}
	}
	for i := range infos {
		if pastDue(infos[i], now, lease) {
			infos[i].Overdue = true
			infos[i].OverdueReason = overdueReason(in.Layout().KeyPrefix, running, page.NextCursor != "", now.Sub(infos[i].Pending))
		}
	}
	return nil
}

// pastDue reports whether info's pending tick fell due more than lease before now.
func pastDue(info Info, now time.Time, lease time.Duration) bool {
	return !info.Paused && !info.Pending.IsZero() && now.Sub(info.Pending) > lease
}

// overdueReason says, in words, why a tick late by late was not acted on and what to do, with
// running the Schedulers subscribed to TickTopic on the page read, more whether more records
// follow.
func overdueReason(prefix string, running int, more bool, late time.Duration) string {
	if running == 0 && !more {
		return fmt.Sprintf("no Scheduler is running for key prefix %q: start one (schedule.New, then Run)", prefix)
	}
	count := fmt.Sprint(running)
	if more {
		count += "+"
	}
	return fmt.Sprintf("%s Scheduler(s) running for key prefix %q, but none has acted on this tick for %s: check their logs for errors (a Scheduler cut short is acted on again after its lease)", count, prefix, late.Truncate(time.Second))
}
