package wake

import (
	"context"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestWakeUpsTravelOverShardedPubSubOnRedis7 checks that on a Redis that has sharded Pub/Sub
// the hub subscribes the wake channel as a shard channel, and that a wake-up sent as the
// scripts send it (SPUBLISH) reaches it with its due time.
func TestWakeUpsTravelOverShardedPubSubOnRedis7(t *testing.T) {
	client := redistest.Start(t, redistest.Options{}).Client(t)
	hub := newTestHub(t, client)
	ctx := context.Background()
	const topic = "sharded"
	channel := channelOf(topic)

	wu := hub.Watch(channel)
	waitReady(t, wu)
	assert.Equal(t, modeSharded, hubMode(hub))
	shard, err := client.PubSubShardChannels(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{channel}, shard, "PUBSUB SHARDCHANNELS")
	classic, err := client.PubSubChannels(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, classic, "PUBSUB CHANNELS")

	assertWakes(t, client, channel, wu)
}

// TestWakeUpsTravelOverClassicPubSubOnMiniredis checks that where Redis refuses SSUBSCRIBE
// (miniredis, Redis before 7) the hub subscribes with SUBSCRIBE, and a wake-up sent as the
// scripts send it there (PUBLISH, after SPUBLISH failed) reaches it.
func TestWakeUpsTravelOverClassicPubSubOnMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	hub := newTestHub(t, client)
	const topic = "classic"
	channel := channelOf(topic)

	wu := hub.Watch(channel)
	waitReady(t, wu)
	assert.Equal(t, modeClassic, hubMode(hub))
	classic, err := client.PubSubChannels(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{channel}, classic, "PUBSUB CHANNELS")

	assertWakes(t, client, channel, wu)
}

// TestWakeUpsReachTheHubFromEveryMasterOfACluster watches one topic on each master of a Redis
// Cluster: the hub holds one connection per master, each channel is a shard channel on the
// master of its topic's slot and nowhere else, and a wake-up on each channel wakes its watcher.
func TestWakeUpsReachTheHubFromEveryMasterOfACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
	client := cluster.Client(t)
	hub := newTestHub(t, client)
	ctx := context.Background()

	byMaster := topicPerMaster(t, client)
	watches := map[string]*Watch{}
	for _, topic := range byMaster {
		watches[topic] = hub.Watch(channelOf(topic))
	}
	for _, wu := range watches {
		waitReady(t, wu)
	}
	assert.Equal(t, modeSharded, hubMode(hub))
	masters, err := cluster.Masters()
	require.NoError(t, err)
	assert.ElementsMatch(t, masters, connAddrs(hub), "one Pub/Sub connection per master")

	for _, addr := range cluster.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		shard, err := node.PubSubShardChannels(ctx, "*").Result()
		require.NoError(t, err)
		classic, err := node.PubSubChannels(ctx, "*").Result()
		require.NoError(t, err)
		_ = node.Close()
		var want []string
		if topic, ok := byMaster[addr]; ok {
			want = []string{channelOf(topic)}
		}
		assert.ElementsMatch(t, want, shard, "PUBSUB SHARDCHANNELS on %s", addr)
		assert.Empty(t, classic, "PUBSUB CHANNELS on %s", addr)
	}
	for _, topic := range byMaster {
		assertWakes(t, client, channelOf(topic), watches[topic])
	}
}

// topicPerMaster returns a topic whose wake channel is on each master of the cluster, by master
// address.
func topicPerMaster(t *testing.T, client *redis.ClusterClient) map[string]string {
	t.Helper()
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < redistest.ClusterMasters; i++ {
		require.Less(t, i, 1000, "no topic found for every master")
		topic := "wake-" + strconv.Itoa(i)
		master, err := client.MasterForKey(context.Background(), channelOf(topic))
		require.NoError(t, err)
		if _, ok := byMaster[master.Options().Addr]; !ok {
			byMaster[master.Options().Addr] = topic
		}
	}
	return byMaster
}

// connAddrs returns the addresses of the hub's connections.
func connAddrs(hub *Hub) []string {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	var addrs []string
	for addr := range hub.conns {
		addrs = append(addrs, addr)
	}
	return addrs
}
