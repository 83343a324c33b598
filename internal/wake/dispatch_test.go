package wake

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestWakeChannelFollowsItsSlotToAnotherMaster moves the slot of a watched topic to another
// master. Redis drops the shard channel ("sunsubscribe"); the hub subscribes it again on the
// new master, which wakes the watcher, and wake-ups reach it from there.
func TestWakeChannelFollowsItsSlotToAnotherMaster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
	client := cluster.Client(t)
	hub := newTestHub(t, client)
	ctx := context.Background()

	const topic = "moving"
	channel := channelOf(topic)
	wu := hub.Watch(channel)
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
	assertWakes(t, client, channel, wu)
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
		hub := newTestHub(t, client)
		topics := []string{"reconnect-a", "reconnect-b"}
		watches := watchTopics(t, hub, topics)
		require.NoError(t, client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
		for i, topic := range topics {
			assert.Zero(t, receiveDue(t, watches[i]), "subscribed again, the watcher checks now")
			assertWakes(t, client, channelOf(topic), watches[i])
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
		client := cluster.Client(t)
		hub := newTestHub(t, client)
		var topics []string
		var master string
		for i := 0; len(topics) < 2; i++ {
			require.Less(t, i, 1000, "no two topics found on one master")
			topic := "reconnect-" + strconv.Itoa(i)
			m, err := client.MasterForKey(ctx, channelOf(topic))
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
			slots[client.ClusterKeySlot(ctx, channelOf(topic)).Val()] = true
		}
		require.Len(t, slots, 2, "the topics are in different slots")
		watches := watchTopics(t, hub, topics)
		node := redis.NewClient(&redis.Options{Addr: master})
		t.Cleanup(func() { _ = node.Close() })
		require.NoError(t, node.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
		for i, topic := range topics {
			assert.Zero(t, receiveDue(t, watches[i]), "subscribed again, the watcher checks now")
			assertWakes(t, client, channelOf(topic), watches[i])
		}
		shard, err := node.PubSubShardChannels(ctx, "*").Result()
		require.NoError(t, err)
		assert.Len(t, shard, 2, "PUBSUB SHARDCHANNELS on %s", master)
	})
}

// watchTopics watches the wake channel of each topic, waits until the watchers
// are ready, and takes the wake-up of the confirmation.
func watchTopics(t *testing.T, hub *Hub, topics []string) []*Watch {
	var watches []*Watch
	for _, topic := range topics {
		watches = append(watches, hub.Watch(channelOf(topic)))
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
