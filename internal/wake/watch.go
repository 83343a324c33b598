package wake

// This file owns a Watch: one subscription's view of its channel, and how wake-ups reach it
// without ever blocking the hub.

import "sync"

// Watch is one subscription's view of a wake channel, returned by Hub.Watch.
type Watch struct {
	due chan int64
	// ready is closed once Redis has confirmed the subscription of the watched channel.
	ready     chan struct{}
	readyOnce sync.Once
}

// Due receives the earliest due time (Unix µs, Redis clock) announced on the channel since the
// last receive; 0 means "check now": Redis (re)confirmed the channel, and wake-ups sent before
// may be lost, or a script asked for it (a removal of the group). The hub never blocks on it: a
// value not yet received is merged with the next, keeping the earlier.
func (wu *Watch) Due() <-chan int64 { return wu.due }

// Ready is closed once Redis has confirmed the subscription of the watched channel: from then
// on, every wake-up published on it reaches Due (until the connection breaks, after which Due
// receives a 0 when Redis confirms the channel again).
func (wu *Watch) Ready() <-chan struct{} { return wu.ready }

func (wu *Watch) markReady() {
	wu.readyOnce.Do(func() { close(wu.ready) })
}

// send hands due to the watcher without blocking, merging it with a pending value.
func (wu *Watch) send(due int64) {
	for {
		select {
		case wu.due <- due:
			return
		default:
		}
		select {
		case old := <-wu.due:
			due = min(due, old)
		default:
		}
	}
}
