package wake

// This file owns what Redis sends to the hub: one dispatch goroutine per connection reads it,
// hands wake-ups to the watchers, and updates what Redis has confirmed of each channel on
// confirmations, refusals, broken connections and slots that moved.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// dispatch reads what Redis sends on c until c is closed.
func (w *Hub) dispatch(c *conn) {
	defer w.wg.Done()
	failures := 0
	for {
		msg, err := c.ps.ReceiveTimeout(w.ctx, pingInterval)
		if err != nil {
			var redisErr redis.Error
			var netErr net.Error
			switch {
			case errors.Is(err, redis.ErrClosed):
				w.lost(c)
				return
			case errors.As(err, &redisErr):
				w.refused(c, err)
				continue
			case errors.As(err, &netErr) && netErr.Timeout():
				ctx, cancel := context.WithTimeout(w.ctx, confirmTimeout)
				err = c.ps.Ping(ctx)
				cancel()
				if err == nil {
					continue
				}
			}
			// The connection broke. go-redis connects again, to the same node, and subscribes
			// again to the channels it was given.
			w.reset(c)
			if failures++; failures > 1 {
				select {
				case <-time.After(backoff(failures)):
				case <-w.ctx.Done():
					return
				}
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			w.subscription(c, m)
		case *redis.Message:
			due, err := strconv.ParseInt(m.Payload, 10, 64)
			if err != nil {
				due = 0
			}
			w.notify(m.Channel, due)
		}
	}
}

// subscription handles Redis's reply to a subscribe or an unsubscribe, or an unsubscribe Redis
// sent by itself. Only replies on the channel's current connection count.
func (w *Hub) subscription(c *conn, m *redis.Subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.channels[m.Channel]
	if ch == nil || ch.conn != c {
		return
	}
	switch m.Kind {
	case "subscribe", "ssubscribe":
		if ch.state == stateJoining || ch.state == stateJoined {
			w.confirmLocked(ch)
		}
	case "unsubscribe", "sunsubscribe":
		if ch.state == stateLeaving {
			ch.state, ch.conn = stateIdle, nil
		} else {
			// Redis dropped the channel: its slot moved to another master (or this answers an
			// unsubscribe whose reply was given up on). It is subscribed again where it is now,
			// and the confirmation wakes the watchers, since wake-ups published in between are
			// lost.
			ch.state, ch.retryAt = stateJoining, time.Time{}
			w.reloadClusterState()
		}
		w.kickLocked()
	}
}

// confirmLocked marks ch confirmed: its watchers are ready, and check now. w.mu is held.
func (w *Hub) confirmLocked(ch *channelState) {
	if ch == nil {
		return
	}
	ch.state, ch.failures = stateJoined, 0
	for wu := range ch.watchers {
		wu.send(0) // first, so that a watcher that sees ready finds it
		wu.markReady()
	}
}

// refused handles an error reply on c. It names no channel, so every channel of c not yet
// confirmed is sent again. (The reply to dropping a channel from the connection of the master
// it left is an error too, with no channel to send again.)
func (w *Hub) refused(c *conn, err error) {
	w.mu.Lock()
	now := time.Now()
	again := 0
	for _, ch := range w.channels {
		if ch.conn == c && ch.state == stateJoining {
			ch.retryAt = now.Add(backoff(ch.failures))
			ch.failures++
			again++
		}
	}
	if again > 0 {
		w.reloadClusterState()
		w.kickLocked()
	}
	w.mu.Unlock()
	if again > 0 {
		w.logger.Info("Redis refused a wake channel subscription; subscribing again", watermill.LogFields{"master": c.addr, "channels": again, "err": err})
	}
}

// reset handles a broken connection: go-redis subscribes again to its channels on the new one,
// and their confirmations count again; an unsubscribe under way is done.
func (w *Hub) reset(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, ch := range w.channels {
		if ch.conn != c {
			continue
		}
		switch ch.state {
		case stateJoined:
			ch.state, ch.retryAt = stateJoining, now.Add(confirmTimeout)
		case stateLeaving:
			ch.state, ch.conn = stateIdle, nil
		}
	}
	w.reloadClusterState()
	w.kickLocked()
}

// lost handles c closed by someone other than the hub (go-redis closes the client of a node that
// left the cluster): its channels are subscribed again elsewhere.
func (w *Hub) lost(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if w.conns[c.addr] == c {
		delete(w.conns, c.addr)
	}
	for _, ch := range w.channels {
		if ch.conn != c {
			continue
		}
		if ch.state == stateLeaving {
			ch.state, ch.conn = stateIdle, nil
		} else {
			ch.state, ch.conn, ch.retryAt = stateJoining, nil, time.Time{}
		}
	}
	w.kickLocked()
}

// reloadClusterState asks go-redis to refresh its view of a Redis Cluster's slots, in the
// background, before a channel is subscribed again on the master of its slot.
func (w *Hub) reloadClusterState() {
	if cc, ok := w.client.(*redis.ClusterClient); ok {
		cc.ReloadState(w.ctx)
	}
}

// notify hands due to the watchers of channel.
func (w *Hub) notify(channel string, due int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.channels[channel]; ch != nil {
		for wu := range ch.watchers {
			wu.send(due)
		}
	}
}
