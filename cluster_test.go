package redisdelay_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// shared is the Redis Cluster the tests of this package share: starting one takes about two
// seconds, and tests never interfere because each uses topics of its own. Tests that kill nodes
// must start their own with redistest.StartCluster.
var shared struct {
	once    sync.Once
	cluster *redistest.Cluster
	err     error
}

// sharedCluster returns the package's Redis Cluster, starting it on first use. It skips t when
// redis-server or redis-cli is missing (fails it when REDISDELAY_REQUIRE_REDIS=1). TestMain
// stops the cluster after the last test.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	redistest.SkipIfNotInstalled(t)
	shared.once.Do(func() {
		start := time.Now()
		shared.cluster, shared.err = redistest.NewCluster(redistest.ClusterOptions{})
		if shared.err == nil {
			t.Logf("Redis Cluster %v ready in %s", shared.cluster.Addrs(), time.Since(start).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		t.Fatalf("start the shared Redis Cluster: %v", shared.err)
	}
	return shared.cluster
}

// TestMain stops the shared Redis Cluster, if a test started it, once every test has run, and
// says how many tests were skipped for want of redis-server.
func TestMain(m *testing.M) {
	runCrashChild()
	redistest.Announce("the root package's tests, the longest: about 3 minutes with -race on 2 idle cores, more on busy ones")
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	redistest.ReportSkips()
	os.Exit(code)
}

// clusterBackend is the shared Redis Cluster (3 masters, 3 replicas) behind a ClusterClient of
// the test's own, closed when the test ends.
func clusterBackend(t *testing.T) backend {
	return backend{name: "cluster", client: sharedCluster(t).Client(t)}
}

// newClientLike returns a new client of the same kind as b's, on the same Redis (the same
// server, or the same cluster), for a test that needs connections of its own, such as a
// consumer that is going to crash. The caller closes it.
func newClientLike(b backend) redis.UniversalClient {
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Options().Addrs})
	case *redis.Client:
		return redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	default:
		panic(fmt.Sprintf("newClientLike: unsupported client %T", b.client))
	}
}

// TestPubSubCluster runs Watermill's universal Pub/Sub test suite in long mode against a Redis
// Cluster through a ClusterClient, with REDISDELAY_LONG=1 only: the quick run has TestPubSub.
func TestPubSubCluster(t *testing.T) {
	redistest.SkipUnlessLong(t, "Watermill's universal suite in long mode on a Redis Cluster")
	universalSuite(t, clusterBackend(t))
}

// TestClusterWakeUpsReachSubscribersOnEveryNode checks that a delayed message published to a
// topic on any master wakes the subscriptions of every Subscriber: each Subscriber listens on
// one sharded Pub/Sub connection per master for topics spread over all three masters.
// Subscriptions sleep with a one-minute recheck interval and nothing due, so only a wake-up can
// get a message delivered within the test's bounds.
func TestClusterWakeUpsReachSubscribersOnEveryNode(t *testing.T) {
	b := clusterBackend(t)
	cc := b.client.(*redis.ClusterClient)
	ctx := context.Background()

	slots, err := cc.ClusterSlots(ctx).Result()
	require.NoError(t, err)
	owner := func(slot int) string {
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End {
				return s.Nodes[0].Addr
			}
		}
		return ""
	}
	// One topic per master: the hash tag of a topic's keys is the topic name.
	byMaster := map[string]string{}
	for len(byMaster) < redistest.ClusterMasters {
		topic := newTopic()
		m := owner(keySlot("{" + topic + "}"))
		require.NotEmpty(t, m, "no master owns the slot of %s", topic)
		if _, ok := byMaster[m]; !ok {
			byMaster[m] = topic
		}
	}
	var topics []string
	for _, topic := range byMaster {
		topics = append(topics, topic)
	}
	slices.Sort(topics)

	pub := newPublisher(t, b)
	type subscription struct {
		group, topic string
		ch           <-chan *message.Message
	}
	var subs []subscription
	var claims atomic.Int64
	countClaims := scriptFault{match: isClaimCall, around: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		claims.Add(1)
		return err
	}}
	for i, group := range []string{"first", "second", "third"} {
		// A client per Subscriber, and each subscribes in another topic order, so that the
		// Pub/Sub connections (on the node of the first channel) are on different masters.
		client := newClientLike(b)
		t.Cleanup(func() { _ = client.Close() })
		client.AddHook(countClaims)
		sub := newSubscriber(t, backend{name: b.name, client: client}, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup = group
			c.RecheckInterval = time.Minute
		})
		for j := range topics {
			topic := topics[(i+j)%len(topics)]
			ch, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)
			subs = append(subs, subscription{group: group, topic: topic, ch: ch})
		}
	}
	// Every subscription has made its first claim, found nothing and gone to sleep for the
	// recheck interval, a minute.
	require.Eventually(t, func() bool { return claims.Load() >= int64(len(subs)) }, 10*time.Second, 5*time.Millisecond)

	const wait = 200 * time.Millisecond
	published := map[string]time.Time{}
	for _, topic := range topics {
		msg := message.NewMessage(topic, []byte("wake up"))
		delay.Message(msg, delay.For(wait))
		published[topic] = time.Now()
		require.NoError(t, pub.Publish(topic, msg))
	}
	for _, s := range subs {
		msg := receive(t, s.ch, 5*time.Second)
		waited := time.Since(published[s.topic])
		assert.Equal(t, s.topic, msg.UUID, "group %s", s.group)
		assert.GreaterOrEqual(t, waited, wait, "group %s topic %s on %s: early", s.group, s.topic, owner(keySlot("{"+s.topic+"}")))
		assert.Less(t, waited, wait+2*time.Second, "group %s topic %s on %s: late, the wake-up did not arrive", s.group, s.topic, owner(keySlot("{"+s.topic+"}")))
		msg.Ack()
	}
}

// TestEveryScriptCallStaysInOneSlot records every command a Publisher and Subscribers send
// during a workload that exercises every script (publish to several topics and two groups with
// delays, claim, ack, nack with and without a changed message, lease extension, release on
// Close, dead-lettering) and checks what Redis Cluster requires: all keys of a call are
// declared in KEYS and map to one hash slot, and no other command touches several keys or
// scans the key space. It runs on miniredis, and on the shared cluster when there is one, where
// the slots are also checked against CLUSTER KEYSLOT.
func TestEveryScriptCallStaysInOneSlot(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		rec := &commandRecorder{}
		client.AddHook(rec)
		runScriptWorkload(t, backend{name: "miniredis", client: client})
		rec.check(t, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		b := clusterBackend(t)
		client := b.client.(*redis.ClusterClient)
		rec := &commandRecorder{}
		client.AddHook(rec)
		runScriptWorkload(t, b)
		rec.check(t, client)
	})
}

// runScriptWorkload drives a Publisher and two consumer groups through every script.
func runScriptWorkload(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lease = 300 * time.Millisecond // heartbeat every 100 ms
	topics := []string{newTopic(), newTopic(), newTopic()}
	groups := []string{"billing", "shipping"}

	pub := newPublisher(t, b)
	subs := map[string]*redisdelay.Subscriber{}
	for _, g := range groups {
		subs[g] = newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
			c.ConsumerGroup = g
			c.LeaseTimeout = lease
			c.NackBackoff = redisdelay.ConstantBackoff(20 * time.Millisecond)
			c.MaxAttempts = 2
		})
		for _, topic := range topics {
			require.NoError(t, subs[g].SubscribeInitialize(topic))
			require.NoError(t, subs[g].SubscribeInitialize(redisdelay.DefaultDeadLetterTopic(topic, g)))
		}
	}

	later := func(uuid string, d time.Duration) *message.Message {
		msg := message.NewMessage(uuid, []byte(uuid))
		delay.Message(msg, delay.For(d))
		return msg
	}
	// Per topic and group: "nack-me" is nacked once with a change, "flaky" once without,
	// "poison" until it is dead-lettered, "slow" is held across heartbeats.
	acked := []string{"now-1", "now-2", "later-50", "later-150", "slow", "nack-me", "flaky"}
	for _, topic := range topics {
		require.NoError(t, pub.Publish(topic, message.NewMessage("now-1", nil), message.NewMessage("now-2", nil)))
		require.NoError(t, pub.Publish(topic, later("later-50", 50*time.Millisecond)))
		require.NoError(t, pub.Publish(topic, later("later-150", 150*time.Millisecond)))
		require.NoError(t, pub.Publish(topic, message.NewMessage("slow", nil), message.NewMessage("nack-me", nil),
			message.NewMessage("flaky", nil), message.NewMessage("poison", nil)))
	}

	type delivery struct{ group, topic, uuid string }
	done := make(chan delivery, 100)
	var wg sync.WaitGroup
	for _, g := range groups {
		for _, topic := range topics {
			ch, err := subs[g].Subscribe(ctx, topic)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for msg := range ch {
					first := msg.Metadata.Get(redisdelay.AttemptMetadataKey) == "1"
					switch {
					case msg.UUID == "poison":
						msg.Nack()
						continue
					case msg.UUID == "nack-me" && first:
						msg.Metadata.Set("handled-by", g)
						msg.Nack()
						continue
					case msg.UUID == "flaky" && first:
						msg.Nack()
						continue
					case msg.UUID == "slow":
						time.Sleep(lease) // a handler slower than its lease is the scenario
					}
					msg.Ack()
					done <- delivery{g, topic, msg.UUID}
				}
			}()
		}
	}
	want := len(groups) * len(topics) * len(acked)
	got := map[delivery]int{}
	deadline := time.After(15 * time.Second)
	for range want {
		select {
		case d := <-done:
			got[d]++
		case <-deadline:
			t.Fatalf("only %d of %d deliveries: %v", len(got), want, got)
		}
	}
	for _, g := range groups {
		for _, topic := range topics {
			for _, uuid := range acked {
				assert.Equal(t, 1, got[delivery{g, topic, uuid}], "%s %s %s", g, topic, uuid)
			}
		}
	}
	// "poison" reaches each group's dead-letter topic.
	for _, g := range groups {
		for _, topic := range topics {
			ch, err := subs[g].Subscribe(ctx, redisdelay.DefaultDeadLetterTopic(topic, g))
			require.NoError(t, err)
			letter := receive(t, ch, 5*time.Second)
			assert.Equal(t, "poison", letter.UUID)
			letter.Ack()
		}
	}
	// Both Subscribers keep a worker record (worker_beat.lua), read by an Inspector on the
	// recorded client (workers_list.lua); Close deletes it (worker_gone.lua).
	waitWorkers(t, newInspector(t, b, 1), "both groups' worker records", 5*time.Second, func(ws []redisdelay.WorkerInfo) bool {
		seen := map[string]bool{}
		for _, w := range ws {
			for _, s := range w.Subscriptions {
				seen[s.Group] = true
			}
		}
		return seen[groups[0]] && seen[groups[1]]
	})
	cancel() // stops the subscriptions, which release whatever they still hold
	wg.Wait()
	require.NoError(t, subs[groups[0]].Close())

	// A fast consumer: after two acks the third message waits in the subscription, claimed and
	// not handed out, while heartbeats confirm the acks (ack.lua) and extend its lease
	// (extend.lua); Close releases it unhandled (release.lua). The Inspector, on a client of its
	// own, checks each step in Redis.
	inspectClient := newClientLike(b)
	t.Cleanup(func() { _ = inspectClient.Close() })
	in := newInspector(t, backend{name: b.name, client: inspectClient}, 1)
	topic := newTopic()
	sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) { c.LeaseTimeout = lease })
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage("tail-1", nil)))
	receive(t, ch, 2*time.Second).Ack()
	require.NoError(t, pub.Publish(topic, message.NewMessage("tail-2", nil), message.NewMessage("tail-3", nil)))
	receive(t, ch, 2*time.Second).Ack()
	held := func() redisdelay.MessageInfo {
		page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateInFlight})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1, "only tail-3 is leased once the acks are confirmed")
		require.Equal(t, "tail-3", page.Messages[0].UUID)
		require.Equal(t, 1, page.Messages[0].Attempt, "its lease was lost and it was claimed again")
		return page.Messages[0]
	}
	waitStats(t, in, topic, redisdelay.DefaultConsumerGroup, "holding only tail-3, leased", func(s redisdelay.GroupStats) bool { return s.InFlight == 1 && s.Due == 0 })
	first := held().LeaseDeadline
	for deadline := time.Now().Add(10 * lease); !held().LeaseDeadline.After(first.Add(lease)); {
		require.True(t, time.Now().Before(deadline), "the lease of the waiting message was not extended past %s", first)
		time.Sleep(lease / 10)
	}
	require.NoError(t, sub.Close())
	// Released, due at its first due time, without the claim counting as an attempt.
	page, err := in.List(context.Background(), topic, redisdelay.DefaultConsumerGroup, redisdelay.ListOptions{State: redisdelay.StateDue})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	assert.Equal(t, "tail-3", page.Messages[0].UUID)
	assert.Equal(t, 0, page.Messages[0].Attempt, "attempts so far")
	assert.Zero(t, statsOf(t, in, topic, redisdelay.DefaultConsumerGroup).InFlight, "Close left a lease")
	again := receive(t, subscribe(t, newSubscriber(t, b, nil), topic), 2*time.Second)
	assert.Equal(t, "tail-3", again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptMetadataKey), "released unhandled: still its first attempt")
	again.Ack()
	waitDrained(t, in, topic, redisdelay.DefaultConsumerGroup)
	require.NoError(t, subs[groups[1]].Close())
}

// commandRecorder is a go-redis hook that records the arguments of every command it sees.
type commandRecorder struct {
	mu   sync.Mutex
	cmds [][]string
}

func (r *commandRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *commandRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *commandRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *commandRecorder) record(cmd redis.Cmder) {
	args := make([]string, len(cmd.Args()))
	for i, a := range cmd.Args() {
		switch a := a.(type) {
		case string:
			args[i] = a
		case []byte:
			args[i] = string(a)
		default:
			args[i] = fmt.Sprint(a)
		}
	}
	args[0] = strings.ToLower(args[0])
	r.mu.Lock()
	r.cmds = append(r.cmds, args)
	r.mu.Unlock()
}

// Commands the adapter may send besides scripts: keyless ones, and ones whose only key is
// their first argument. Anything else (KEYS, SCAN, MGET, a multi-key DEL...) fails the test.
var (
	keylessCommands   = []string{"ping", "hello", "client", "auth", "select", "readonly", "script", "time", "info", "cluster", "command", "config", "publish", "subscribe", "unsubscribe"}
	singleKeyCommands = []string{"hset", "hsetnx", "hgetall", "sadd", "scard", "smembers", "sismember", "zcard", "zrange", "zrangebyscore", "zscore", "hget", "hlen", "hexists", "get", "exists", "type"}
)

// check asserts that every recorded script call names its keys in KEYS, all in one slot, that
// wake channels passed as arguments are in that slot too, that every script was called, and
// that no other command touches several keys. With a cluster client it also compares the
// computed slots with CLUSTER KEYSLOT.
func (r *commandRecorder) check(t *testing.T, cluster *redis.ClusterClient) {
	r.mu.Lock()
	cmds := slices.Clone(r.cmds) // CLUSTER KEYSLOT below goes through the hook too
	r.mu.Unlock()
	scripts := map[string]int{} // SHA1 of the script -> calls
	names := map[string]int{}
	calls := 0
	seenKeys := map[string]bool{}
	for _, args := range cmds {
		name := args[0]
		names[name]++
		switch {
		case name == "evalsha" || name == "eval" || name == "evalsha_ro" || name == "eval_ro":
			require.GreaterOrEqual(t, len(args), 3, "%v", args)
			sha := args[1]
			if strings.HasPrefix(name, "eval") && !strings.HasPrefix(name, "evalsha") {
				sum := sha1.Sum([]byte(args[1]))
				sha = hex.EncodeToString(sum[:])
			}
			id := sha[:min(8, len(sha))]
			numkeys, err := strconv.Atoi(args[2])
			require.NoError(t, err, "%v", args[:3])
			if !assert.GreaterOrEqual(t, numkeys, 1, "script %s declares no keys, so Redis Cluster cannot route it", id) ||
				!assert.LessOrEqual(t, 3+numkeys, len(args)) {
				continue
			}
			calls++
			scripts[sha]++
			keys := args[3 : 3+numkeys]
			slot := keySlot(keys[0])
			for _, k := range keys {
				seenKeys[k] = true
				assert.Truef(t, strings.HasPrefix(k, redisdelay.DefaultKeyPrefix+"{"), "script %s key %q lacks the {topic} hash tag", id, k)
				assert.Equalf(t, slot, keySlot(k), "script %s: key %q is in slot %d, key %q in %d (CROSSSLOT)", id, keys[0], slot, k, keySlot(k))
			}
			for _, a := range args[3+numkeys:] {
				if strings.HasPrefix(a, redisdelay.DefaultKeyPrefix+"{") && strings.HasSuffix(a, ":wake") {
					assert.Equalf(t, slot, keySlot(a), "script %s: wake channel %q is not in the slot of its keys", id, a)
				}
			}
		case slices.Contains(keylessCommands, name):
		case slices.Contains(singleKeyCommands, name):
			if assert.GreaterOrEqual(t, len(args), 2, "%v", args) {
				seenKeys[args[1]] = true
			}
		default:
			t.Errorf("unexpected command %q (%d args): only scripts and single-key commands keep the adapter Redis Cluster safe", name, len(args)-1)
		}
	}
	t.Logf("%d commands %v, %d script calls of %d scripts, %d keys", len(cmds), names, calls, len(scripts), len(seenKeys))
	assert.GreaterOrEqual(t, calls, 60, "too few script calls for the workload; is the hook installed?")
	// register, publish, claim, ack, nack, extend, release, deadletter.
	assert.GreaterOrEqual(t, len(scripts), 8, "the workload should run every script: %v", scripts)

	if cluster != nil {
		ctx := context.Background()
		n := 0
		for k := range seenKeys {
			if n++; n > 40 {
				break
			}
			want, err := cluster.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			assert.EqualValues(t, want, keySlot(k), "CLUSTER KEYSLOT %s", k)
		}
	}
}

// keySlot is the Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag, the part
// between the first '{' and the next '}' when that is not empty, or else of the whole key,
// modulo 16384.
func keySlot(key string) int {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	return int(crc16([]byte(key)) % 16384)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster uses.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestKeySlotMatchesRedis checks keySlot against values from the Redis Cluster specification.
func TestKeySlotMatchesRedis(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16([]byte("123456789")))
	assert.Equal(t, 12182, keySlot("foo"))
	assert.Equal(t, keySlot("{user1000}.following"), keySlot("{user1000}.followers"))
	assert.Equal(t, keySlot("bar"), keySlot("foo{bar}{zap}"))
	assert.Equal(t, keySlot("{bar"), keySlot("foo{{bar}}zap"))
	assert.NotEqual(t, keySlot("bar"), keySlot("foo{}{bar}"), "an empty tag hashes the whole key")
	assert.Equal(t, crc16([]byte("foo{}{bar}"))%16384, uint16(keySlot("foo{}{bar}")))
}
