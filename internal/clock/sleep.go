package clock

import "time"

// PreciseTail is how much of a wait SleepPrecisely takes, at most, rather than a Go timer. Go
// timers wake through the runtime's network poller, whose timeout has millisecond resolution
// on Linux (epoll_wait): an idle process's timer fires up to 1 ms late, and a wait of 250 µs
// takes 1 ms. So a wait for a due time runs its timer until PreciseTail before the end, and
// sleeps the rest precisely.
const PreciseTail = time.Millisecond

// SleepPrecisely sleeps d (no less; a d above PreciseTail is cut to PreciseTail). On Linux it
// waits for a timerfd(2) in the runtime's poller, which the kernel's timer wakes within tens of
// µs, leaving its thread to other goroutines meanwhile; elsewhere it sleeps on a Go timer. It
// cannot be interrupted, which is why it only takes the last PreciseTail of a wait: a Go timer,
// which a select can abandon, takes the rest.
func SleepPrecisely(d time.Duration) {
	if d <= 0 {
		return
	}
	sleepPrecisely(min(d, PreciseTail))
}
