package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// wakeHub owns the Pub/Sub connections of one Subscriber, what Redis has confirmed of each wake
// channel, and the goroutines that serve them: one that subscribes and unsubscribes (the only
// one that sends commands on the connections) and one per connection that dispatches what
// Redis sends. Scripts publish a group's new earliest due time (Unix µs) on the group's wake
// channel whenever it moves earlier (lua/lib/wake.lua); subscriptions sleep until their earliest
// due time and are woken by it. A (re)subscribe confirmation wakes a channel's subscriptions
// too, since wake-ups published while the channel was not subscribed are lost.
//
// Scripts and the hub must agree on the kind of Pub/Sub. A script tries SPUBLISH and falls back
// to PUBLISH when Redis answers it with an error. The hub decides once, on its first
// subscription: it sends SSUBSCRIBE and reads the reply; a confirmation means sharded Pub/Sub
// (Redis 7), an error reply (Redis 6.2 and miniredis do not know the command) means classic
// SUBSCRIBE, and no reply (Redis down) decides nothing, so the next attempt probes again.
//
// Classic Pub/Sub needs a single connection: Redis Cluster broadcasts PUBLISH to every node.
// Sharded Pub/Sub keeps a wake-up on the shard of its channel, which carries its topic's hash
// tag, so on a Redis Cluster the hub keeps one connection per master, each to that master's
// own address, and each channel on the connection of its master. A channel whose slot moves
// (resharding, failover) is dropped by Redis with an "sunsubscribe", or refused with an error
// reply that cannot be told apart from the others on its connection (MOVED from a stale view of
// the cluster, CROSSSLOT when go-redis resubscribes channels of several slots with one command
// after a reconnect): either way the channel is subscribed again, one channel per command, on
// the connection of its master as the cluster is then seen.
//
// No Redis I/O happens under mu. A watch or an unwatch only changes what is wanted; the
// subscriber goroutine compares that with each channel's state and sends one command at a
// time, so a watch and an unwatch of the same channel cannot race on the wire. A channel is
// not subscribed again while its unsubscribe is unanswered (unless the reply is lost with its
// connection): replies come in the order of the commands, so a confirmation received while
// joining answers a subscribe sent since the last unsubscribe, and a watcher is ready only once
// Redis has confirmed its channel.
type wakeHub struct {
	client redis.UniversalClient
	logger watermill.LoggerAdapter
	// ctx ends with close; it bounds every call of the hub's goroutines.
	ctx    context.Context
	cancel context.CancelFunc
	// kick wakes the subscriber goroutine when a channel may need a command.
	kick chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	started  bool
	mode     wakeMode
	conns    map[string]*wakeConn // by master address; "" for the only connection
	channels map[string]*wakeChannel
}

// wakeMode is the kind of Pub/Sub the hub uses, decided by its first subscription.
type wakeMode int

const (
	wakeUndecided wakeMode = iota
	wakeSharded
	wakeClassic
)

// wakeState is what Redis has confirmed of one channel on its connection.
type wakeState int

const (
	// stateIdle: not subscribed, nothing under way.
	stateIdle wakeState = iota
	// stateJoining: a subscribe was sent (or is about to be, or failed and will be sent again at
	// retryAt) and is not confirmed.
	stateJoining
	// stateJoined: Redis confirmed the subscription.
	stateJoined
	// stateLeaving: an unsubscribe was sent and is not answered.
	stateLeaving
)

const (
	// wakeConfirmTimeout is how long a subscribe may wait for its confirmation, or an
	// unsubscribe for its reply, before the hub takes it as lost; it also bounds each command.
	wakeConfirmTimeout = 3 * time.Second
	// wakeRetryDelay is the backoff after failed or refused subscribes of a channel: the first
	// retry is at once, the second after wakeRetryDelay, and each further one waits twice as
	// long, up to wakeConfirmTimeout.
	wakeRetryDelay = 100 * time.Millisecond
	// wakePingInterval is how long a connection may be silent before the hub pings it, so that
	// a broken connection is found and replaced (go-redis's own health check for Pub/Sub).
	wakePingInterval = 3 * time.Second
)

// wakeConn is one Pub/Sub connection of the hub.
type wakeConn struct {
	ps      *redis.PubSub
	addr    string // the master it is pinned to; "" when it is the only connection
	sharded bool
	closed  bool // closed by the hub (guarded by wakeHub.mu)
}

// wakeChannel is one wake channel: who waits on it, and what Redis has confirmed.
type wakeChannel struct {
	watchers map[*wakeWatch]struct{}
	state    wakeState
	// conn is the connection of the last command for the channel, and so of the replies that
	// count; nil when none was sent, or the connection is gone.
	conn *wakeConn
	// retryAt is, when joining, when to send the subscribe again unless confirmed; when
	// leaving, when to stop waiting for the reply.
	retryAt  time.Time
	failures int // failed or refused subscribes since the last confirmation
}

// wakeWatch is one subscription's view of its channel.
type wakeWatch struct {
	// due receives the earliest due time (Unix µs, Redis clock) announced since the last
	// receive; 0 means "check now". Sends never block: a pending value is merged with the new
	// one, keeping the earlier.
	due chan int64
	// ready is closed once Redis has confirmed the subscription of the watched channel.
	ready     chan struct{}
	readyOnce sync.Once
}

func newWakeHub(client redis.UniversalClient, logger watermill.LoggerAdapter) *wakeHub {
	ctx, cancel := context.WithCancel(context.Background())
	return &wakeHub{
		client:   client,
		logger:   logger,
		ctx:      ctx,
		cancel:   cancel,
		kick:     make(chan struct{}, 1),
		conns:    map[string]*wakeConn{},
		channels: map[string]*wakeChannel{},
	}
}

// watch registers interest in channel. The returned watch is ready at once when Redis has
// confirmed the channel already, else once it does; the subscribe is sent by the hub's
// subscriber goroutine, and go-redis subscribes again by itself after a reconnect. After close,
// the watch is never ready nor woken.
func (w *wakeHub) watch(channel string) *wakeWatch {
	wu := &wakeWatch{due: make(chan int64, 1), ready: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wu
	}
	if !w.started {
		w.started = true
		w.wg.Add(1)
		go w.subscriber()
	}
	ch := w.channels[channel]
	if ch == nil {
		ch = &wakeChannel{watchers: map[*wakeWatch]struct{}{}}
		w.channels[channel] = ch
	}
	ch.watchers[wu] = struct{}{}
	if ch.state == stateJoined {
		wu.markReady()
	}
	w.kickLocked()
	return wu
}

// unwatch removes a subscription's interest in channel; the hub unsubscribes the channel when
// nobody watches it any more.
func (w *wakeHub) unwatch(channel string, wu *wakeWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.channels[channel]; ch != nil {
		delete(ch.watchers, wu)
		if len(ch.watchers) == 0 {
			w.kickLocked()
		}
	}
}

func (w *wakeHub) kickLocked() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// wakeCommand is one command of the subscriber goroutine: subscribe or unsubscribe channel, or,
// with no channel, close an unused connection.
type wakeCommand struct {
	subscribe bool
	channel   string
	ch        *wakeChannel
	conn      *wakeConn // the connection to unsubscribe on, or to close; for a subscribe, the one it was on
}

// subscriber sends the commands that bring Redis to what the watchers want, one at a time.
func (w *wakeHub) subscriber() {
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
func (w *wakeHub) next() (*wakeCommand, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, 0
	}
	now := time.Now()
	var earliest time.Time
	later := func(t time.Time) {
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	used := map[*wakeConn]bool{}
	for name, ch := range w.channels {
		wanted := len(ch.watchers) > 0
		if ch.state == stateLeaving && !now.Before(ch.retryAt) {
			// The reply was lost with its connection, whose replacement lacks the channel.
			ch.state, ch.conn = stateIdle, nil
		}
		switch {
		case ch.state == stateLeaving:
			later(ch.retryAt)
		case !wanted && (ch.state == stateIdle || ch.conn == nil):
			delete(w.channels, name)
			continue
		case !wanted:
			ch.state, ch.retryAt = stateLeaving, now.Add(wakeConfirmTimeout)
			return &wakeCommand{channel: name, ch: ch, conn: ch.conn}, 0
		case ch.state == stateJoined:
		case now.Before(ch.retryAt):
			later(ch.retryAt)
		default:
			ch.state, ch.retryAt = stateJoining, now.Add(wakeConfirmTimeout)
			return &wakeCommand{subscribe: true, channel: name, ch: ch, conn: ch.conn}, 0
		}
		if ch.conn != nil {
			used[ch.conn] = true
		}
	}
	// Every channel's command is settled: close the connections no channel uses.
	for addr, c := range w.conns {
		if !used[c] && !c.closed {
			delete(w.conns, addr)
			c.closed = true
			return &wakeCommand{conn: c}, 0
		}
	}
	if earliest.IsZero() {
		return nil, 0
	}
	return nil, max(time.Until(earliest), time.Millisecond)
}

// send sends one command, outside mu.
func (w *wakeHub) send(cmd *wakeCommand) {
	ctx, cancel := context.WithTimeout(w.ctx, wakeConfirmTimeout)
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
func (w *wakeHub) subscribe(ctx context.Context, cmd *wakeCommand) {
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
		case mode == wakeUndecided:
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
			cmd.ch.retryAt = time.Now().Add(retryDelay(cmd.ch.failures))
			cmd.ch.failures++
		}
		// The master may be gone (failover): the retry asks the cluster again.
		w.reloadClusterState()
		w.mu.Unlock()
	}
}

func (c *wakeConn) unsubscribe(ctx context.Context, channel string) error {
	if c.sharded {
		return c.ps.SUnsubscribe(ctx, channel)
	}
	return c.ps.Unsubscribe(ctx, channel)
}

// connFor returns the connection for channel, creating it when needed: with sharded Pub/Sub
// on a Redis Cluster, the one pinned to the master of the channel's slot; else the only one.
// An undecided hub creates a sharded one, for the probe. Only the subscriber goroutine calls it.
func (w *wakeHub) connFor(ctx context.Context, channel string) (*wakeConn, error) {
	w.mu.Lock()
	mode := w.mode
	w.mu.Unlock()
	var node redis.UniversalClient = w.client
	addr := ""
	if cc, ok := w.client.(*redis.ClusterClient); ok && mode != wakeClassic {
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
	c := &wakeConn{addr: addr, sharded: mode != wakeClassic}
	// With no channel, neither call does I/O: the connection is made by the first subscribe.
	if c.sharded {
		c.ps = node.SSubscribe(w.ctx)
	} else {
		c.ps = node.Subscribe(w.ctx)
	}
	w.conns[addr] = c
	if mode != wakeUndecided {
		w.startDispatch(c)
	}
	return c, nil
}

func (w *wakeHub) startDispatch(c *wakeConn) {
	w.wg.Add(1)
	go w.dispatch(c)
}

// probe sends the hub's first SSUBSCRIBE, for ch, on c, which has no dispatcher yet, and reads
// the reply itself: a confirmation decides sharded Pub/Sub and an error reply classic; anything
// else is an error and decides nothing.
func (w *wakeHub) probe(ctx context.Context, c *wakeConn, channel string, ch *wakeChannel) error {
	err := c.ps.SSubscribe(ctx, channel)
	var reply any
	if err == nil {
		reply, err = c.ps.ReceiveTimeout(ctx, wakeConfirmTimeout)
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
		w.mode = wakeSharded
		w.startDispatch(c)
		if ch.conn == c && ch.state == stateJoining {
			w.confirmLocked(ch)
		}
		w.mu.Unlock()
		return nil
	}
	// The connection goes: classic needs another kind, and after a failure its state is
	// unknown. Its channel is sent again, at once when the mode was decided.
	delete(w.conns, c.addr)
	c.closed = true
	if ch.conn == c {
		ch.state, ch.conn = stateJoining, nil
	}
	if classic {
		w.mode = wakeClassic
		ch.retryAt = time.Time{}
		w.kickLocked()
	}
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

// retryDelay is the wait before the next attempt after the given number of failed ones.
func retryDelay(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	return min(wakeRetryDelay<<min(failures-1, 16), wakeConfirmTimeout)
}

// dispatch reads what Redis sends on c until c is closed.
func (w *wakeHub) dispatch(c *wakeConn) {
	defer w.wg.Done()
	failures := 0
	for {
		msg, err := c.ps.ReceiveTimeout(w.ctx, wakePingInterval)
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
				ctx, cancel := context.WithTimeout(w.ctx, wakeConfirmTimeout)
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
				case <-time.After(retryDelay(failures)):
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
func (w *wakeHub) subscription(c *wakeConn, m *redis.Subscription) {
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

// confirmLocked marks ch confirmed: its watchers are ready, and check now.
func (w *wakeHub) confirmLocked(ch *wakeChannel) {
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
func (w *wakeHub) refused(c *wakeConn, err error) {
	w.mu.Lock()
	now := time.Now()
	again := 0
	for _, ch := range w.channels {
		if ch.conn == c && ch.state == stateJoining {
			ch.retryAt = now.Add(retryDelay(ch.failures))
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
func (w *wakeHub) reset(c *wakeConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, ch := range w.channels {
		if ch.conn != c {
			continue
		}
		switch ch.state {
		case stateJoined:
			ch.state, ch.retryAt = stateJoining, now.Add(wakeConfirmTimeout)
		case stateLeaving:
			ch.state, ch.conn = stateIdle, nil
		}
	}
	w.reloadClusterState()
	w.kickLocked()
}

// lost handles c closed by someone other than the hub (go-redis closes the client of a node that
// left the cluster): its channels are subscribed again elsewhere.
func (w *wakeHub) lost(c *wakeConn) {
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
func (w *wakeHub) reloadClusterState() {
	if cc, ok := w.client.(*redis.ClusterClient); ok {
		cc.ReloadState(w.ctx)
	}
}

func (w *wakeHub) notify(channel string, due int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.channels[channel]; ch != nil {
		for wu := range ch.watchers {
			wu.send(due)
		}
	}
}

func (wu *wakeWatch) markReady() {
	wu.readyOnce.Do(func() { close(wu.ready) })
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

// close closes every Pub/Sub connection and waits for the hub's goroutines to stop.
func (w *wakeHub) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	conns := make([]*wakeConn, 0, len(w.conns))
	for _, c := range w.conns {
		c.closed = true
		conns = append(conns, c)
	}
	w.mu.Unlock()
	w.cancel()
	for _, c := range conns {
		_ = c.ps.Close()
	}
	w.wg.Wait()
}
