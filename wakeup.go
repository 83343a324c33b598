package redisdelay

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// wakeups multiplexes the wake channels of all subscriptions of one Subscriber over a single
// Redis Pub/Sub connection. Scripts PUBLISH a group's new earliest due time (Unix µs) on the
// group's channel whenever it moves earlier; subscriptions sleep until their earliest due time
// and are woken by it. A (re)subscribe confirmation wakes a channel's subscriptions too, since
// messages published while the connection was down are lost.
type wakeHub struct {
	client redis.UniversalClient
	logger watermill.LoggerAdapter

	mu       sync.Mutex
	pubsub   *redis.PubSub
	watchers map[string]map[*wakeWatch]struct{}
	done     chan struct{}
}

// wakeup is one subscription's view of its channel.
type wakeWatch struct {
	// due receives the earliest due time (Unix µs, Redis clock) announced since the last
	// receive; 0 means "check now". Sends never block: a pending value is merged with the new
	// one, keeping the earlier.
	due chan int64
	// ready is closed once Redis has confirmed the subscription.
	ready     chan struct{}
	readyOnce sync.Once
}

func newWakeHub(client redis.UniversalClient, logger watermill.LoggerAdapter) *wakeHub {
	return &wakeHub{client: client, logger: logger, watchers: map[string]map[*wakeWatch]struct{}{}}
}

// watch subscribes to channel. The subscription may be confirmed later (see wakeup.ready):
// go-redis sends SUBSCRIBE without waiting, and resubscribes by itself after a reconnect.
func (w *wakeHub) watch(channel string) *wakeWatch {
	wu := &wakeWatch{due: make(chan int64, 1), ready: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pubsub == nil {
		w.pubsub = w.client.Subscribe(context.Background())
		w.done = make(chan struct{})
		go w.dispatch(w.pubsub, w.done)
	}
	set, ok := w.watchers[channel]
	if !ok {
		set = map[*wakeWatch]struct{}{}
		w.watchers[channel] = set
	}
	set[wu] = struct{}{}
	if !ok {
		if err := w.pubsub.Subscribe(context.Background(), channel); err != nil {
			// go-redis resubscribes to every channel it was asked for when it reconnects.
			w.logger.Debug("Subscribe to wake channel failed, will retry on reconnect", watermill.LogFields{"channel": channel, "err": err})
		}
	} else {
		wu.readyOnce.Do(func() { close(wu.ready) })
	}
	return wu
}

// unwatch removes a subscription's interest in channel.
func (w *wakeHub) unwatch(channel string, wu *wakeWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.watchers[channel]
	delete(set, wu)
	if len(set) == 0 && set != nil {
		delete(w.watchers, channel)
		if w.pubsub != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = w.pubsub.Unsubscribe(ctx, channel)
			cancel()
		}
	}
}

func (w *wakeHub) dispatch(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				w.notify(m.Channel, 0, true)
			}
		case *redis.Message:
			due, err := strconv.ParseInt(m.Payload, 10, 64)
			if err != nil {
				due = 0
			}
			w.notify(m.Channel, due, false)
		}
	}
}

func (w *wakeHub) notify(channel string, due int64, subscribed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wu := range w.watchers[channel] {
		if subscribed {
			wu.readyOnce.Do(func() { close(wu.ready) })
		}
		wu.send(due)
	}
}

func (wu *wakeWatch) send(due int64) {
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

// close closes the Pub/Sub connection and waits for the dispatcher to stop.
func (w *wakeHub) close() {
	w.mu.Lock()
	ps, done := w.pubsub, w.done
	w.pubsub = nil
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}
