package wake

// This file owns the subscriber goroutine: the only code that sends commands on the hub's
// connections (SSUBSCRIBE or SUBSCRIBE, SUNSUBSCRIBE or UNSUBSCRIBE, and closing a connection),
// the probe that decides between sharded and classic Pub/Sub, and the connection of each
// channel's master.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// command is one command of the subscriber goroutine: subscribe or unsubscribe a channel, or,
// with no channel, close an unused connection.
type command struct {
	subscribe bool
	channel   string
	ch        *channelState
	conn      *conn // the connection to unsubscribe on, or to close; for a subscribe, the one it was on
}

// subscriber sends the commands that bring Redis to what the watchers want, one at a time.
func (w *Hub) subscriber() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		cmd, wait := w.next()
		if cmd != nil {
			w.send(cmd)
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-w.kick:
		case <-timer.C:
		case <-w.ctx.Done():
			return
		}
		timer.Stop()
	}
}

// next picks the next command to send and records it as under way, or returns how long to
// wait for the next retry (0: until kicked).
func (w *Hub) next() (*command, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, 0
	}
	now := time.Now()
	var earliest time.Time
	used := map[*conn]bool{}
	for name, ch := range w.channels {
		cmd, retryAt := w.commandForLocked(name, ch, now)
		if cmd != nil {
			return cmd, 0
		}
		if !retryAt.IsZero() && (earliest.IsZero() || retryAt.Before(earliest)) {
			earliest = retryAt
		}
		if ch.conn != nil && w.channels[name] != nil {
			used[ch.conn] = true
		}
	}
	// Every channel's command is settled: close the connections no channel uses.
	for addr, c := range w.conns {
		if !used[c] && !c.closed {
			delete(w.conns, addr)
			c.closed = true
			return &command{conn: c}, 0
		}
	}
	if earliest.IsZero() {
		return nil, 0
	}
	return nil, max(time.Until(earliest), time.Millisecond)
}

// commandForLocked returns the command that the channel named name needs now, recorded as under
// way, or else when it may need one (zero: not before a kick). It forgets a channel that nobody
// watches and Redis no longer has. w.mu is held.
func (w *Hub) commandForLocked(name string, ch *channelState, now time.Time) (*command, time.Time) {
	wanted := len(ch.watchers) > 0
	if ch.state == stateLeaving && !now.Before(ch.retryAt) {
		// The reply was lost with its connection, whose replacement lacks the channel.
		ch.state, ch.conn = stateIdle, nil
	}
	switch {
	case ch.state == stateLeaving:
		return nil, ch.retryAt
	case !wanted && (ch.state == stateIdle || ch.conn == nil):
		delete(w.channels, name)
	case !wanted:
		ch.state, ch.retryAt = stateLeaving, now.Add(confirmTimeout)
		return &command{channel: name, ch: ch, conn: ch.conn}, time.Time{}
	case ch.state == stateJoined:
	case now.Before(ch.retryAt):
		return nil, ch.retryAt
	default:
		ch.state, ch.retryAt = stateJoining, now.Add(confirmTimeout)
		return &command{subscribe: true, channel: name, ch: ch, conn: ch.conn}, time.Time{}
	}
	return nil, time.Time{}
}

// send sends one command, outside mu.
func (w *Hub) send(cmd *command) {
	ctx, cancel := context.WithTimeout(w.ctx, confirmTimeout)
	defer cancel()
	switch {
	case cmd.channel == "":
		_ = cmd.conn.ps.Close()
	case cmd.subscribe:
		w.subscribe(ctx, cmd)
	default:
		if err := cmd.conn.unsubscribe(ctx, cmd.channel); err != nil {
			// go-redis forgot the channel before it failed, and replaced the connection.
			w.mu.Lock()
			if cmd.ch.state == stateLeaving && cmd.ch.conn == cmd.conn {
				cmd.ch.state, cmd.ch.conn = stateIdle, nil
			}
			w.mu.Unlock()
		}
	}
}

// subscribe subscribes a channel on the connection of its master, dropping it first from the
// connection it was on when it moved. Undecided, it is the probe that decides the mode.
func (w *Hub) subscribe(ctx context.Context, cmd *command) {
	c, err := w.connFor(ctx, cmd.channel)
	if err == nil {
		w.mu.Lock()
		moved := cmd.conn != nil && cmd.conn != c && !cmd.conn.closed
		cmd.ch.state, cmd.ch.conn = stateJoining, c
		mode := w.mode
		w.mu.Unlock()
		if moved {
			// Else go-redis would subscribe it again there after a reconnect. The reply, an
			// sunsubscribe or an error from the old master, comes on a connection that no
			// longer counts for the channel.
			_ = cmd.conn.unsubscribe(ctx, cmd.channel)
		}
		switch {
		case mode == modeUndecided:
			err = w.probe(ctx, c, cmd.channel, cmd.ch)
		case c.sharded:
			err = c.ps.SSubscribe(ctx, cmd.channel)
		default:
			err = c.ps.Subscribe(ctx, cmd.channel)
		}
	}
	if err != nil {
		w.logger.Debug("Subscribe to wake channel failed, will retry", watermill.LogFields{"channel": cmd.channel, "err": err})
		w.mu.Lock()
		if cmd.ch.state == stateJoining {
			cmd.ch.retryAt = time.Now().Add(backoff(cmd.ch.failures))
			cmd.ch.failures++
		}
		// The master may be gone (failover): the retry asks the cluster again.
		w.reloadClusterState()
		w.mu.Unlock()
	}
}

func (c *conn) unsubscribe(ctx context.Context, channel string) error {
	if c.sharded {
		return c.ps.SUnsubscribe(ctx, channel)
	}
	return c.ps.Unsubscribe(ctx, channel)
}

// connFor returns the connection for channel, creating it when needed: with sharded Pub/Sub
// on a Redis Cluster, the one pinned to the master of the channel's slot; else the only one.
// An undecided hub creates a sharded one, for the probe. Only the subscriber goroutine calls it.
func (w *Hub) connFor(ctx context.Context, channel string) (*conn, error) {
	w.mu.Lock()
	mode := w.mode
	w.mu.Unlock()
	var node redis.UniversalClient = w.client
	addr := ""
	if cc, ok := w.client.(*redis.ClusterClient); ok && mode != modeClassic {
		master, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return nil, err
		}
		node, addr = master, master.Options().Addr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, redis.ErrClosed
	}
	if c := w.conns[addr]; c != nil {
		return c, nil
	}
	c := &conn{addr: addr, sharded: mode != modeClassic}
	// With no channel, neither call does I/O: the connection is made by the first subscribe.
	if c.sharded {
		c.ps = node.SSubscribe(w.ctx)
	} else {
		c.ps = node.Subscribe(w.ctx)
	}
	w.conns[addr] = c
	if mode != modeUndecided {
		w.startDispatch(c)
	}
	return c, nil
}

func (w *Hub) startDispatch(c *conn) {
	w.wg.Add(1)
	go w.dispatch(c)
}

// probe sends the hub's first SSUBSCRIBE, for ch, on c, which has no dispatcher yet, and reads
// the reply itself: a confirmation decides sharded Pub/Sub and an error reply classic; anything
// else is an error and decides nothing.
func (w *Hub) probe(ctx context.Context, c *conn, channel string, ch *channelState) error {
	err := c.ps.SSubscribe(ctx, channel)
	var reply any
	if err == nil {
		reply, err = c.ps.ReceiveTimeout(ctx, confirmTimeout)
	}
	var redisErr redis.Error
	classic := errors.As(err, &redisErr)
	sub, confirmed := reply.(*redis.Subscription)
	confirmed = confirmed && sub.Kind == "ssubscribe" && sub.Channel == channel

	w.mu.Lock()
	if w.closed || c.closed {
		w.mu.Unlock()
		return redis.ErrClosed
	}
	if confirmed {
		w.mode = modeSharded
		w.startDispatch(c)
		if ch.conn == c && ch.state == stateJoining {
			w.confirmLocked(ch)
		}
		w.mu.Unlock()
		return nil
	}
	w.dropProbeLocked(c, ch, classic)
	w.mu.Unlock()
	_ = c.ps.Close()
	switch {
	case classic:
		w.logger.Info("Redis has no sharded Pub/Sub; wake-ups use SUBSCRIBE", watermill.LogFields{"err": err})
		return nil
	case err == nil:
		return fmt.Errorf("SSUBSCRIBE %s: unexpected reply %v", channel, reply)
	default:
		return err
	}
}

// dropProbeLocked forgets c, the connection of a probe that did not confirm ch: classic needs
// another kind, and after a failure its state is unknown. Its channel is sent again, at once
// when the probe decided classic. w.mu is held.
func (w *Hub) dropProbeLocked(c *conn, ch *channelState, classic bool) {
	delete(w.conns, c.addr)
	c.closed = true
	if ch.conn == c {
		ch.state, ch.conn = stateJoining, nil
	}
	if classic {
		w.mode = modeClassic
		ch.retryAt = time.Time{}
		w.kickLocked()
	}
}

// backoff is the wait before the next attempt after the given number of failed ones.
func backoff(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	return min(retryDelay<<min(failures-1, 16), confirmTimeout)
}
