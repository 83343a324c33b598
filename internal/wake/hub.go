package wake

// This file owns the Hub's state (its connections, what Redis has confirmed of each channel, who
// watches it) and the calls the Subscriber makes: NewHub, Watch, Unwatch and Close.

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// Hub owns the Pub/Sub connections of one Subscriber, what Redis has confirmed of each wake
// channel, and the goroutines that serve them: one that subscribes and unsubscribes (the only
// one that sends commands on the connections) and one per connection that dispatches what
// Redis sends. See the package documentation for how it chooses sharded or classic Pub/Sub and
// follows a Redis Cluster. It is safe for concurrent use.
type Hub struct {
	client redis.UniversalClient
	logger watermill.LoggerAdapter
	// ctx ends with Close; it bounds every call of the hub's goroutines.
	ctx    context.Context
	cancel context.CancelFunc
	// kick wakes the subscriber goroutine when a channel may need a command.
	kick chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	started  bool
	mode     pubsubMode
	conns    map[string]*conn // by master address; "" for the only connection
	channels map[string]*channelState
}

// pubsubMode is the kind of Pub/Sub the hub uses, decided by its first subscription.
type pubsubMode int

const (
	modeUndecided pubsubMode = iota
	modeSharded
	modeClassic
)

// state is what Redis has confirmed of one channel on its connection.
type state int

const (
	// stateIdle: not subscribed, nothing under way.
	stateIdle state = iota
	// stateJoining: a subscribe was sent (or is about to be, or failed and will be sent again at
	// retryAt) and is not confirmed.
	stateJoining
	// stateJoined: Redis confirmed the subscription.
	stateJoined
	// stateLeaving: an unsubscribe was sent and is not answered.
	stateLeaving
)

const (
	// confirmTimeout is how long a subscribe may wait for its confirmation, or an unsubscribe
	// for its reply, before the hub takes it as lost; it also bounds each command.
	confirmTimeout = 3 * time.Second
	// retryDelay is the backoff after failed or refused subscribes of a channel: the first
	// retry is at once, the second after retryDelay, and each further one waits twice as long,
	// up to confirmTimeout.
	retryDelay = 100 * time.Millisecond
	// pingInterval is how long a connection may be silent before the hub pings it, so that a
	// broken connection is found and replaced (go-redis's own health check for Pub/Sub).
	pingInterval = 3 * time.Second
)

// conn is one Pub/Sub connection of the hub.
type conn struct {
	ps      *redis.PubSub
	addr    string // the master it is pinned to; "" when it is the only connection
	sharded bool
	closed  bool // closed by the hub (guarded by Hub.mu)
}

// channelState is one wake channel: who waits on it, and what Redis has confirmed.
type channelState struct {
	watchers map[*Watch]struct{}
	state    state
	// conn is the connection of the last command for the channel, and so of the replies that
	// count; nil when none was sent, or the connection is gone.
	conn *conn
	// retryAt is, when joining, when to send the subscribe again unless confirmed; when
	// leaving, when to stop waiting for the reply.
	retryAt  time.Time
	failures int // failed or refused subscribes since the last confirmation
}

// NewHub returns a Hub that subscribes wake channels over client, a *redis.Client, a
// *redis.ClusterClient (one connection per master) or another redis.UniversalClient (one
// connection). It makes no Redis call: the first Watch starts its goroutines. logger gets the
// hub's retries and its choice of classic Pub/Sub.
func NewHub(client redis.UniversalClient, logger watermill.LoggerAdapter) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		client:   client,
		logger:   logger,
		ctx:      ctx,
		cancel:   cancel,
		kick:     make(chan struct{}, 1),
		conns:    map[string]*conn{},
		channels: map[string]*channelState{},
	}
}

// Watch registers interest in channel and returns the watcher's view of it. The watch is ready
// at once when Redis has confirmed the channel already, else once it does; the subscribe is
// sent by the hub's subscriber goroutine, and go-redis subscribes again by itself after a
// reconnect. After Close, the watch is never ready nor woken. Each Watch needs its Unwatch.
func (w *Hub) Watch(channel string) *Watch {
	wu := &Watch{due: make(chan int64, 1), ready: make(chan struct{})}
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
		ch = &channelState{watchers: map[*Watch]struct{}{}}
		w.channels[channel] = ch
	}
	ch.watchers[wu] = struct{}{}
	if ch.state == stateJoined {
		wu.markReady()
	}
	w.kickLocked()
	return wu
}

// Unwatch removes the interest of wu, a Watch of channel; the hub unsubscribes the channel when
// nobody watches it any more. wu receives nothing more.
func (w *Hub) Unwatch(channel string, wu *Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.channels[channel]; ch != nil {
		delete(ch.watchers, wu)
		if len(ch.watchers) == 0 {
			w.kickLocked()
		}
	}
}

// kickLocked wakes the subscriber goroutine; w.mu is held.
func (w *Hub) kickLocked() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close closes every Pub/Sub connection and waits for the hub's goroutines to stop. It never
// closes the Redis client, and is idempotent.
func (w *Hub) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	conns := make([]*conn, 0, len(w.conns))
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
