package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinelStartsAndFailsOver checks the helper itself: a failover client reaches the master
// through the sentinels, and after the master is killed the sentinels promote the replica and
// the same client writes to it.
func TestSentinelStartsAndFailsOver(t *testing.T) {
	SkipUnlessLong(t, "a Sentinel failover, the helper the failover proofs use")
	start := time.Now()
	s := StartSentinel(t, SentinelOptions{})
	t.Logf("sentinel setup ready in %s", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	client := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if addr, err := s.MasterAddr(ctx); err != nil || addr != s.Master.Addr {
		t.Fatalf("master %q (%v), want %s", addr, err, s.Master.Addr)
	}
	// Wait until the write reached the replica, so that the failover keeps it.
	replica := s.Replica.Client(t)
	for replica.Get(ctx, "k").Val() != "before" {
		if time.Since(start) > time.Minute {
			t.Fatal("the write never reached the replica")
		}
		time.Sleep(10 * time.Millisecond)
	}
	killed := time.Now()
	s.Master.Stop()
	for {
		addr, err := s.MasterAddr(ctx)
		if err == nil && addr == s.Replica.Addr {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no failover within 30 s: %q %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica promoted %s after the kill", time.Since(killed).Round(time.Millisecond))
	if got := client.Get(ctx, "k").Val(); got != "before" {
		t.Fatalf("after the failover k = %q, want %q", got, "before")
	}
	if err := client.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
}
