package redisdelay

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"

	"github.com/watermill-redisdelay/redisdelay/internal/store"
)

// wakeEventTimeout bounds every wait for a hub event in these tests.
const wakeEventTimeout = 5 * time.Second

// TestWakeWatcherIsReadyOnlyOnceRedisConfirmedItsChannel holds back what Redis sends to the hub
// while the hub subscribes a second channel: although Redis has subscribed it, neither of its
// watchers is ready until the confirmation reaches the hub, while a new watcher of the channel
// confirmed before is ready at once. The confirmation wakes the watchers (due 0).
func TestWakeWatcherIsReadyOnlyOnceRedisConfirmedItsChannel(t *testing.T) {
	for name, addr := range map[string]string{"miniredis": miniredis.RunT(t).Addr(), "redis": redistest.Start(t, redistest.Options{}).Addr} {
		t.Run(name, func(t *testing.T) {
			proxy := newHoldingProxy(t, addr)
			direct := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = direct.Close() })
			hub := newTestWakeHub(t, redis.NewClient(&redis.Options{Addr: proxy.addr()}))

			confirmed := hub.watch("wake:a")
			waitReady(t, confirmed)
			proxy.hold()

			first := hub.watch("wake:b")
			second := hub.watch("wake:b")
			again := hub.watch("wake:a")
			assert.True(t, isReady(again), "a new watcher of a confirmed channel is ready at once")
			require.Eventually(t, func() bool { return serverSubscribers(direct, "wake:b") == 1 }, wakeEventTimeout, 5*time.Millisecond,
				"Redis never subscribed the hub to wake:b")
			assert.False(t, isReady(first), "ready before the hub read Redis's confirmation")
			assert.False(t, isReady(second), "the second watcher of an unconfirmed channel is ready")

			proxy.release()
			for _, wu := range []*wakeWatch{first, second} {
				waitReady(t, wu)
				assert.Zero(t, receiveDue(t, wu), "the confirmation wakes the watcher to check now")
			}
		})
	}
}

// TestWakeUpsTravelOverShardedPubSubOnRedis7 checks that on a Redis that has sharded Pub/Sub
// the hub subscribes the wake channel as a shard channel, and that a publish's wake-up from the
// scripts (SPUBLISH) reaches it with the message's due time.
func TestWakeUpsTravelOverShardedPubSubOnRedis7(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	hub := newTestWakeHub(t, client)
	ctx := context.Background()
	const topic = "sharded"
	channel := testStore(client).WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup))

	wu := hub.watch(channel)
	waitReady(t, wu)
	assert.Equal(t, wakeSharded, hubMode(hub))
	shard, err := client.PubSubShardChannels(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{channel}, shard, "PUBSUB SHARDCHANNELS")
	classic, err := client.PubSubChannels(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, classic, "PUBSUB CHANNELS")

	assertPublishWakes(t, client, topic, wu)
}

// TestWakeUpsTravelOverClassicPubSubOnMiniredis checks that where Redis refuses SSUBSCRIBE
// (miniredis, Redis before 7) the hub subscribes with SUBSCRIBE, and the scripts' fall back to
// PUBLISH reaches it.
func TestWakeUpsTravelOverClassicPubSubOnMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	hub := newTestWakeHub(t, client)
	const topic = "classic"
	channel := testStore(client).WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup))

	wu := hub.watch(channel)
	waitReady(t, wu)
	assert.Equal(t, wakeClassic, hubMode(hub))
	classic, err := client.PubSubChannels(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{channel}, classic, "PUBSUB CHANNELS")

	assertPublishWakes(t, client, topic, wu)
}

// TestWakeUpsReachTheHubFromEveryMasterOfACluster watches one topic on each master of a Redis
// Cluster: the hub holds one connection per master, each channel is a shard channel on the
// master of its topic's slot and nowhere else, and a publish to each topic wakes its watcher.
func TestWakeUpsReachTheHubFromEveryMasterOfACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
	client := cluster.Client(t)
	hub := newTestWakeHub(t, client)
	s := testStore(client)
	ctx := context.Background()

	byMaster := map[string]string{} // master address -> topic
	for i := 0; len(byMaster) < redistest.ClusterMasters; i++ {
		require.Less(t, i, 1000, "no topic found for every master")
		topic := "wake-" + store.NewToken()
		master, err := client.MasterForKey(ctx, keysForTest("", topic, DefaultConsumerGroup).Due)
		require.NoError(t, err)
		if _, ok := byMaster[master.Options().Addr]; !ok {
			byMaster[master.Options().Addr] = topic
		}
	}
	watches := map[string]*wakeWatch{}
	for _, topic := range byMaster {
		watches[topic] = hub.watch(s.WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup)))
	}
	for _, wu := range watches {
		waitReady(t, wu)
	}
	assert.Equal(t, wakeSharded, hubMode(hub))
	hub.mu.Lock()
	var connAddrs []string
	for addr := range hub.conns {
		connAddrs = append(connAddrs, addr)
	}
	hub.mu.Unlock()
	masters, err := cluster.Masters()
	require.NoError(t, err)
	assert.ElementsMatch(t, masters, connAddrs, "one Pub/Sub connection per master")

	for _, addr := range cluster.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		shard, err := node.PubSubShardChannels(ctx, "*").Result()
		require.NoError(t, err)
		classic, err := node.PubSubChannels(ctx, "*").Result()
		require.NoError(t, err)
		_ = node.Close()
		var want []string
		if topic, ok := byMaster[addr]; ok {
			want = []string{s.WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup))}
		}
		assert.ElementsMatch(t, want, shard, "PUBSUB SHARDCHANNELS on %s", addr)
		assert.Empty(t, classic, "PUBSUB CHANNELS on %s", addr)
	}
	for _, topic := range byMaster {
		assertPublishWakes(t, client, topic, watches[topic])
	}
}

// TestWakeChannelFollowsItsSlotToAnotherMaster moves the slot of a watched topic to another
// master. Redis drops the shard channel ("sunsubscribe"); the hub subscribes it again on the
// new master, which wakes the watcher, and wake-ups reach it from there.
func TestWakeChannelFollowsItsSlotToAnotherMaster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
	client := cluster.Client(t)
	hub := newTestWakeHub(t, client)
	s := testStore(client)
	ctx := context.Background()

	const topic = "moving"
	channel := s.WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup))
	wu := hub.watch(channel)
	waitReady(t, wu)
	assert.Zero(t, receiveDue(t, wu))

	slot, err := client.ClusterKeySlot(ctx, channel).Result()
	require.NoError(t, err)
	master, err := client.MasterForKey(ctx, channel)
	require.NoError(t, err)
	from := master.Options().Addr
	masters, err := cluster.Masters()
	require.NoError(t, err)
	to := masters[(slices.Index(masters, from)+1)%len(masters)]
	moveEmptySlot(t, masters, slot, from, to)

	assert.Zero(t, receiveDue(t, wu), "subscribed again on the new master, the watcher checks now")
	target := redis.NewClient(&redis.Options{Addr: to})
	t.Cleanup(func() { _ = target.Close() })
	shard, err := target.PubSubShardChannels(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{channel}, shard, "PUBSUB SHARDCHANNELS on the new master %s", to)
	assertPublishWakes(t, client, topic, wu)
}

// TestWakeHubSubscribesAgainAfterItsConnectionBreaks kills the hub's Pub/Sub connections. Its
// channels are confirmed again, which wakes their watchers, and wake-ups reach them. On a
// cluster two of the channels are on one master in different slots, so that go-redis's own
// resubscribe, one SSUBSCRIBE for both, is refused (CROSSSLOT) and the hub sends them one by one.
func TestWakeHubSubscribesAgainAfterItsConnectionBreaks(t *testing.T) {
	ctx := context.Background()
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		client := srv.Client(t)
		hub := newTestWakeHub(t, client)
		topics := []string{"reconnect-a", "reconnect-b"}
		watches := watchTopics(t, hub, client, topics)
		require.NoError(t, client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
		for i, topic := range topics {
			assert.Zero(t, receiveDue(t, watches[i]), "subscribed again, the watcher checks now")
			assertPublishWakes(t, client, topic, watches[i])
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
		client := cluster.Client(t)
		hub := newTestWakeHub(t, client)
		var topics []string
		var master string
		for i := 0; len(topics) < 2; i++ {
			require.Less(t, i, 1000, "no two topics found on one master")
			topic := "reconnect-" + store.NewToken()
			m, err := client.MasterForKey(ctx, keysForTest("", topic, DefaultConsumerGroup).Due)
			require.NoError(t, err)
			if master == "" {
				master = m.Options().Addr
			}
			if m.Options().Addr == master {
				topics = append(topics, topic)
			}
		}
		slots := map[int64]bool{}
		for _, topic := range topics {
			slots[client.ClusterKeySlot(ctx, keysForTest("", topic, DefaultConsumerGroup).Due).Val()] = true
		}
		require.Len(t, slots, 2, "the topics are in different slots")
		watches := watchTopics(t, hub, client, topics)
		node := redis.NewClient(&redis.Options{Addr: master})
		t.Cleanup(func() { _ = node.Close() })
		require.NoError(t, node.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
		for i, topic := range topics {
			assert.Zero(t, receiveDue(t, watches[i]), "subscribed again, the watcher checks now")
			assertPublishWakes(t, client, topic, watches[i])
		}
		shard, err := node.PubSubShardChannels(ctx, "*").Result()
		require.NoError(t, err)
		assert.Len(t, shard, 2, "PUBSUB SHARDCHANNELS on %s", master)
	})
}

// watchTopics watches the default group's wake channel of each topic, waits until the watchers
// are ready, and takes the wake-up of the confirmation.
func watchTopics(t *testing.T, hub *wakeHub, client redis.UniversalClient, topics []string) []*wakeWatch {
	s := testStore(client)
	var watches []*wakeWatch
	for _, topic := range topics {
		watches = append(watches, hub.watch(s.WakeChannel(store.Partition{Topic: topic}.Of(DefaultConsumerGroup))))
	}
	for _, wu := range watches {
		waitReady(t, wu)
		assert.Zero(t, receiveDue(t, wu))
	}
	return watches
}

// moveEmptySlot gives a slot without keys to another master: importing and migrating, then
// the new owner on every master.
func moveEmptySlot(t *testing.T, masters []string, slot int64, from, to string) {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	nodes := map[string]*redis.Client{}
	for _, addr := range masters {
		nodes[addr] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = nodes[addr].Close() })
		id, err := nodes[addr].ClusterMyID(ctx).Result()
		require.NoError(t, err)
		ids[addr] = id
	}
	require.NoError(t, nodes[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err())
	require.NoError(t, nodes[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err())
	for _, addr := range append([]string{to, from}, masters...) {
		require.NoError(t, nodes[addr].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err())
	}
}

// assertPublishWakes publishes a message due in a minute to the default group of topic, whose
// due set is empty, and checks that the watcher of the group's wake channel learns its due time.
func assertPublishWakes(t *testing.T, client redis.UniversalClient, topic string, wu *wakeWatch) {
	t.Helper()
	s := testStore(client)
	ctx := context.Background()
	drainDue(wu)
	_, _, err := s.RegisterGroup(ctx, store.Partition{Topic: topic}.Of(DefaultConsumerGroup), 0, 0)
	require.NoError(t, err)
	data, err := DefaultMarshalerUnmarshaler{}.Marshal(topic, messageWithUUID("wake"))
	require.NoError(t, err)
	published := time.Now()
	_, err = s.Publish(ctx, store.Partition{Topic: topic}, testCall(), []string{DefaultConsumerGroup}, []store.Outgoing{{Data: data, Delay: time.Minute}})
	require.NoError(t, err)
	due := time.UnixMicro(receiveDue(t, wu))
	// Redis runs on this machine, so its clock is ours.
	assert.WithinDuration(t, published.Add(time.Minute), due, 5*time.Second, "the wake-up carries the message's due time")
}

func newTestWakeHub(t *testing.T, client redis.UniversalClient) *wakeHub {
	hub := newWakeHub(client, watermill.NopLogger{})
	t.Cleanup(func() {
		hub.close()
		_ = client.Close()
	})
	return hub
}

func hubMode(w *wakeHub) wakeMode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mode
}

func isReady(wu *wakeWatch) bool {
	select {
	case <-wu.ready:
		return true
	default:
		return false
	}
}

func waitReady(t *testing.T, wu *wakeWatch) {
	t.Helper()
	select {
	case <-wu.ready:
	case <-time.After(wakeEventTimeout):
		t.Fatalf("watcher not ready within %s", wakeEventTimeout)
	}
}

func receiveDue(t *testing.T, wu *wakeWatch) int64 {
	t.Helper()
	select {
	case due := <-wu.due:
		return due
	case <-time.After(wakeEventTimeout):
		t.Fatalf("no wake-up within %s", wakeEventTimeout)
		return 0
	}
}

func drainDue(wu *wakeWatch) {
	select {
	case <-wu.due:
	default:
	}
}

// serverSubscribers counts the subscribers of channel, sharded (where Redis has it) or
// classic, as Redis sees them.
func serverSubscribers(client *redis.Client, channel string) int64 {
	ctx := context.Background()
	n := client.PubSubNumSub(ctx, channel).Val()[channel]
	if sharded, err := client.PubSubShardNumSub(ctx, channel).Result(); err == nil {
		n += sharded[channel]
	}
	return n
}

// holdingProxy forwards TCP connections to a Redis; while held, what Redis sends back waits.
type holdingProxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	held     bool
	released *sync.Cond
	conns    []net.Conn
}

func newHoldingProxy(t *testing.T, upstream string) *holdingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdingProxy{ln: ln, upstream: upstream}
	p.released = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdingProxy) addr() string { return p.ln.Addr().String() }

func (p *holdingProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *holdingProxy) release() {
	p.mu.Lock()
	p.held = false
	p.released.Broadcast()
	p.mu.Unlock()
}

func (p *holdingProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(server, client)
			_ = server.Close()
		}()
		go p.pipeBack(server, client)
	}
}

// pipeBack copies what Redis sends to the client, waiting while the proxy is held.
func (p *holdingProxy) pipeBack(server, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.released.Wait()
			}
			p.mu.Unlock()
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdingProxy) close() {
	_ = p.ln.Close()
	p.release()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// testStore returns a store on client with the default prefix.
func testStore(client redis.UniversalClient) store.Store {
	return store.New(client, DefaultKeyPrefix, store.Options{})
}

// testCall names a new publish call.
func testCall() store.Call { return store.Call{Token: store.NewToken(), TTL: time.Minute} }
