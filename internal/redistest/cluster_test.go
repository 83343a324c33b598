package redistest

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ReportSkips()
	os.Exit(code)
}

// TestSkippedTestsAreCountedForTheSummaryLine checks the line ReportSkips prints: how many
// tests were skipped and the first reason.
func TestSkippedTestsAreCountedForTheSummaryLine(t *testing.T) {
	skips.mu.Lock()
	savedN, savedReason := skips.n, skips.reason
	skips.n, skips.reason = 0, ""
	skips.mu.Unlock()
	t.Cleanup(func() {
		skips.mu.Lock()
		skips.n, skips.reason = savedN, savedReason
		skips.mu.Unlock()
	})
	if line := skipReport(); line != "" {
		t.Fatalf("no test skipped, but the report is %q", line)
	}
	t.Run("first", func(t *testing.T) { skip(t, "no redis-server here") })
	t.Run("second", func(t *testing.T) { skip(t, "no redis-cli here") })
	line := skipReport()
	if !strings.HasPrefix(line, "SKIPPED 2 real-Redis tests in ") || !strings.HasSuffix(line, ": no redis-server here\n") {
		t.Fatalf("report %q, want 2 tests and the first reason", line)
	}
}

// TestClusterStartsAndFailsOver checks the helper itself: six nodes, three masters each with a
// replica, a working ClusterClient, and a replica that takes over after its master is killed.
func TestClusterStartsAndFailsOver(t *testing.T) {
	SkipUnlessLong(t, "a Cluster failover, the helper the failover proofs use")
	start := time.Now()
	c := StartCluster(t, ClusterOptions{})
	t.Logf("cluster ready in %s: %v", time.Since(start).Round(time.Millisecond), c.Addrs())
	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != ClusterMasters {
		t.Fatalf("masters %v, want %d", masters, ClusterMasters)
	}
	replicas := map[string]string{}
	for _, m := range masters {
		r, err := c.ReplicaOf(m)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(masters, r) || replicas[r] != "" {
			t.Fatalf("replica %s of %s is also a master or another master's replica", r, m)
		}
		replicas[r] = m
	}

	ctx := context.Background()
	client := c.Client(t)
	for _, key := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if err := client.Set(ctx, key, key, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}

	victim := masters[0]
	promoted, _ := c.ReplicaOf(victim)
	// Replication is asynchronous: kill the master only once its replica has every write.
	master, replica := nodeClient(victim), nodeClient(promoted)
	defer master.Close()
	defer replica.Close()
	offset := func(c *redis.Client, field string) string {
		return infoFields(c.Info(ctx, "replication").Val())[field]
	}
	for caughtUp := time.Now().Add(5 * time.Second); offset(master, "master_repl_offset") != offset(replica, "slave_repl_offset"); {
		if time.Now().After(caughtUp) {
			t.Fatal("the replica did not catch up with its master within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	killedAt := time.Now()
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	for {
		now, err := c.Masters()
		if err == nil && slices.Contains(now, promoted) && !slices.Contains(now, victim) {
			t.Logf("replica %s took over from %s after %s", promoted, victim, time.Since(killedAt).Round(time.Millisecond))
			break
		}
		if time.Since(killedAt) > 20*time.Second {
			t.Fatalf("no failover within 20s: masters %v, err %v", now, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.ReplicaOf(promoted); err == nil {
		t.Errorf("promoted master %s should have no healthy replica while its old master is down", promoted)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, key := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		for {
			v, err := client.Get(ctx, key).Result()
			if err == nil && v == key {
				break
			}
			// go-redis refreshes its slot map by itself only every ClusterStateReloadInterval
			// (60 s by default); a refused connection does not trigger a refresh.
			client.ReloadState(ctx)
			if time.Now().After(deadline) {
				t.Fatalf("GET %s after failover: %q %v", key, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
