package redisdelay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-redisdelay/redisdelay"
	"github.com/watermill-redisdelay/redisdelay/internal/redistest"
)

// TestFailoverCarriesOnAndDurablePublishClosesTheLossWindow kills the master of a topic's slot
// on a real Redis Cluster and counts what was lost. To open the window that asynchronous
// replication leaves, the master's replica is paused (SIGSTOP) for a moment before the kill:
// publishes the master acknowledges then never reach the replica that takes over. Without
// DurableReplicas they are lost; with DurableReplicas: 1 they fail with ErrNotDurable instead,
// the publisher retries them after the failover, and nothing acknowledged is lost. Without
// REDISDELAY_LONG=1 it is left out (a long proof).
func TestFailoverCarriesOnAndDurablePublishClosesTheLossWindow(t *testing.T) {
	redistest.SkipUnlessLong(t, "two Redis Cluster failovers under load")
	durables := []int{0, 1}
	for _, durable := range durables {
		t.Run(fmt.Sprintf("DurableReplicas=%d", durable), func(t *testing.T) {
			cluster := redistest.StartCluster(t, redistest.ClusterOptions{})
			opts := cluster.ClientOptions()
			opts.ClusterStateReloadInterval = time.Second // refresh the slot map after a failover
			client := redis.NewClusterClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			b := backend{name: "cluster", client: client}
			ctx := context.Background()

			topic := newTopic()
			due, _ := redisdelay.GroupKeysForTest("", topic, redisdelay.DefaultConsumerGroup)
			master, err := client.MasterForKey(ctx, due)
			require.NoError(t, err)
			victim := master.Options().Addr
			replica, err := cluster.ReplicaOf(victim)
			require.NoError(t, err)

			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
				Client: client, OperationTimeout: time.Second,
				DurableReplicas: durable, DurableTimeout: 200 * time.Millisecond,
			}, nil)
			require.NoError(t, err)
			sub := newSubscriber(t, b, func(c *redisdelay.SubscriberConfig) {
				c.LeaseTimeout = 2 * time.Second
				c.RecheckInterval = 500 * time.Millisecond
				c.OperationTimeout = time.Second
			})
			require.NoError(t, sub.SubscribeInitialize(topic))
			ch, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)
			var mu sync.Mutex
			received := map[string]bool{}
			go func() {
				for msg := range ch {
					mu.Lock()
					received[msg.UUID] = true
					mu.Unlock()
					msg.Ack()
				}
			}()

			acked := map[string]bool{}
			var failed []string
			var windowErrs []error
			seq := 0
			// Every message is due 2 s after its publish, so the ones published in the window are
			// still waiting in Redis when their master dies.
			publishOnce := func(id string) error {
				msg := message.NewMessage(id, nil)
				delay.Message(msg, delay.For(2*time.Second))
				err := pub.Publish(topic, msg)
				if err == nil {
					acked[id] = true
				}
				return err
			}
			next := func() string { seq++; return fmt.Sprintf("m%05d", seq) }

			publishUntilAcked := func(id string, deadline time.Time) {
				for publishOnce(id) != nil {
					require.True(t, time.Now().Before(deadline), "could not publish %s", id)
					time.Sleep(50 * time.Millisecond)
				}
			}
			for i, deadline := 0, time.Now().Add(10*time.Second); i < 100; i++ {
				publishUntilAcked(next(), deadline)
			}

			// The window: once the replica has caught up, its replication link breaks and it
			// stalls; the master goes on acknowledging, then dies.
			victimClient := redis.NewClient(&redis.Options{Addr: victim})
			replicaClient := redis.NewClient(&redis.Options{Addr: replica})
			t.Cleanup(func() { _ = victimClient.Close(); _ = replicaClient.Close() })
			require.Eventually(t, func() bool {
				return replOffset(ctx, victimClient, "master_repl_offset") == replOffset(ctx, replicaClient, "slave_repl_offset")
			}, 5*time.Second, 10*time.Millisecond, "the replica never caught up")
			// Stopped first, then cut off from the master's side, the replica cannot reconnect
			// before it stalls (cut off from its own side, it now and then reconnected in the
			// instant before the stop, and read the window's writes from its socket afterwards).
			require.NoError(t, cluster.Node(replica).Signal(syscall.SIGSTOP))
			require.NoError(t, victimClient.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
			ackedInWindow := 0
			for windowEnd := time.Now().Add(300 * time.Millisecond); time.Now().Before(windowEnd); {
				id := next()
				if err := publishOnce(id); err == nil {
					ackedInWindow++
				} else {
					failed = append(failed, id)
					windowErrs = append(windowErrs, err)
				}
			}
			require.NoError(t, cluster.Kill(victim))
			require.NoError(t, cluster.Node(replica).Signal(syscall.SIGCONT))
			killedAt := time.Now()
			for {
				masters, err := cluster.Masters()
				if err == nil && slices.Contains(masters, replica) {
					break
				}
				require.Less(t, time.Since(killedAt), 20*time.Second, "no failover within 20s")
				time.Sleep(100 * time.Millisecond)
			}
			promotedAfter := time.Since(killedAt)
			// The old master comes back as the new master's replica, as an operator would have it:
			// durable publishes need a replica to confirm them.
			require.NoError(t, cluster.Node(victim).Restart())

			// The publisher carries on by itself once the replica has taken over.
			retryUntil := time.Now().Add(30 * time.Second)
			for _, id := range append(failed, func() []string {
				var more []string
				for i := 0; i < 100; i++ {
					more = append(more, next())
				}
				return more
			}()...) {
				publishUntilAcked(id, retryUntil)
			}
			recoveredAfter := time.Since(killedAt)

			// The subscriber carries on too: everything published after the failover arrives, and
			// it is due after everything published before.
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for i := seq - 99; i <= seq; i++ {
					if !received[fmt.Sprintf("m%05d", i)] {
						return false
					}
				}
				return true
			}, 30*time.Second, 20*time.Millisecond, "messages published after the failover did not arrive")
			mu.Lock()
			defer mu.Unlock()
			lost := 0
			for id := range acked {
				if !received[id] {
					lost++
				}
			}
			t.Logf("DurableReplicas=%d: %d acknowledged (%d while the replica stalled), %d refused in the window, replica promoted %s and publishing recovered %s after the kill, %d delivered, %d acknowledged but lost",
				durable, len(acked), ackedInWindow, len(failed), promotedAfter.Round(time.Millisecond), recoveredAfter.Round(time.Millisecond), len(received), lost)

			for i := seq - 99; i <= seq; i++ { // everything published after the failover arrived
				assert.True(t, received[fmt.Sprintf("m%05d", i)], "m%05d", i)
			}
			if durable == 0 {
				assert.Positive(t, lost, "with the replica stalled, acknowledged publishes are lost in the failover")
				assert.LessOrEqual(t, lost, ackedInWindow, "only publishes acknowledged in the window are lost")
			} else {
				assert.Zero(t, lost, "a durable publish is acknowledged only once a replica has it")
				require.Positive(t, len(failed), "publishes in the window must fail with ErrNotDurable")
				notDurable := 0
				for _, err := range windowErrs {
					if errors.Is(err, redisdelay.ErrNotDurable) {
						notDurable++
					}
				}
				assert.Positive(t, notDurable, "window errors: %v", windowErrs)
			}
		})
	}
}

// replOffset reads a replication offset field from INFO replication, -1 if it is missing.
func replOffset(ctx context.Context, c *redis.Client, field string) int64 {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}
