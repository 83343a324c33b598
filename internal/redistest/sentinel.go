package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireSentinelEnv is the environment variable that turns a missing redis-sentinel into a
// failure of the tests that need one.
const RequireSentinelEnv = "REDISDELAY_REQUIRE_SENTINEL"

// SentinelMasterName is the name under which a Sentinel setup's sentinels monitor its master.
const SentinelMasterName = "redistest"

// SentinelOptions configure a Sentinel setup.
type SentinelOptions struct {
	// DownAfter is the sentinels' down-after-milliseconds: how long the master may be
	// unreachable before a sentinel considers it down. Zero means DefaultSentinelDownAfter.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout. Zero means
	// DefaultSentinelFailoverTimeout.
	FailoverTimeout time.Duration
	// ReadyTimeout bounds the start-up, until the sentinels know each other and the replica.
	// Zero means DefaultSentinelReadyTimeout.
	ReadyTimeout time.Duration
}

const (
	// DefaultSentinelDownAfter is the down-after-milliseconds of a Sentinel setup when
	// SentinelOptions leaves it zero: short, so that a failover test does not wait long.
	DefaultSentinelDownAfter = time.Second
	// DefaultSentinelFailoverTimeout is the failover-timeout of a Sentinel setup when
	// SentinelOptions leaves it zero.
	DefaultSentinelFailoverTimeout = 10 * time.Second
	// DefaultSentinelReadyTimeout bounds the start-up of a Sentinel setup when SentinelOptions
	// leaves it zero. Sentinels find each other through hello messages sent every 2 s.
	DefaultSentinelReadyTimeout = 30 * time.Second
	// SentinelQuorum is how many sentinels must agree that the master is down.
	SentinelQuorum = 2
)

// Sentinel is a Redis Sentinel deployment on loopback ports: one master, one replica and three
// sentinels that monitor the master as SentinelMasterName with a quorum of SentinelQuorum. The
// roles of Master and Replica are the ones they started with; after a failover ask MasterAddr.
type Sentinel struct {
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// StartSentinel starts a Sentinel setup and stops every process when the test ends. It skips
// the test when redis-server or redis-sentinel is not on the PATH, unless
// REDISDELAY_REQUIRE_SENTINEL (or REDISDELAY_REQUIRE_REDIS for redis-server) is "1", which
// makes it fail instead. It returns once every sentinel knows the master, the replica and the
// other two sentinels, and the replica is in sync.
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	bin := Binary(t)
	sentinelBin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		if os.Getenv(RequireSentinelEnv) == "1" {
			t.Fatalf("redis-sentinel is not on the PATH and %s=1", RequireSentinelEnv)
		}
		skip(t, fmt.Sprintf("redis-sentinel is not on the PATH; install it (apt-get install redis-sentinel) or set %s=1 to make this a failure", RequireSentinelEnv))
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = DefaultSentinelDownAfter
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = DefaultSentinelFailoverTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultSentinelReadyTimeout
	}
	s := &Sentinel{}
	t.Cleanup(s.Close)
	if err := s.start(t, bin, sentinelBin, opts); err != nil {
		s.logLogs(t)
		t.Fatalf("start Redis Sentinel: %v", err)
	}
	// Registered after the temporary directories, so that it runs before they are removed.
	t.Cleanup(func() {
		if t.Failed() {
			s.logLogs(t)
		}
	})
	return s
}

func (s *Sentinel) start(t testing.TB, bin, sentinelBin string, opts SentinelOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), opts.ReadyTimeout)
	defer cancel()
	// Replicas sync at once instead of after the default 5 s batching delay.
	fastSync := []string{"--repl-diskless-sync-delay", "0"}
	var err error
	if s.Master, err = newServer(bin, t.TempDir(), Options{Extra: fastSync}); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	host, port, _ := net.SplitHostPort(s.Master.Addr)
	if s.Replica, err = newServer(bin, t.TempDir(), Options{Extra: append(fastSync, "--replicaof", host, port)}); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	// A sentinel reads the master's replicas from its INFO once at start and then every 10 s,
	// so the replica must be in sync before the sentinels start.
	if err := waitUntil(ctx, func(ctx context.Context) error { return replicaInSync(ctx, s.Replica.Addr) }); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		sn, err := newSentinelProcess(sentinelBin, t.TempDir(), s.Master.Addr, opts)
		if err != nil {
			return fmt.Errorf("sentinel %d: %w", i, err)
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	return waitUntil(ctx, s.checkReady)
}

// newSentinelProcess starts one redis-sentinel on a free loopback port with its (rewritable)
// configuration file in dir.
func newSentinelProcess(bin, dir, masterAddr string, opts SentinelOptions) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	host, masterPort, _ := net.SplitHostPort(masterAddr)
	name := SentinelMasterName
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"daemonize no",
		"dir " + dir,
		"logfile " + filepath.Join(dir, "redis.log"),
		"pidfile " + filepath.Join(dir, "redis.pid"),
		fmt.Sprintf("sentinel monitor %s %s %s %d", name, host, masterPort, SentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, opts.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, opts.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		"",
	}, "\n")
	confFile := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, bin: bin, args: []string{confFile}}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// checkReady reports whether every sentinel sees the master at its address, the replica
// healthy, the two other sentinels, and a quorum able to authorise a failover.
func (s *Sentinel) checkReady(ctx context.Context) error {
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
		err := func() error {
			addr, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", sn.Addr, err)
			}
			if got := net.JoinHostPort(addr[0], addr[1]); got != s.Master.Addr {
				return fmt.Errorf("sentinel %s: master %s, want %s", sn.Addr, got, s.Master.Addr)
			}
			replicas, err := c.Replicas(ctx, SentinelMasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: replicas: %w", sn.Addr, err)
			}
			if len(replicas) != 1 || replicas[0]["flags"] != "slave" || replicas[0]["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replicas %v", sn.Addr, replicas)
			}
			sentinels, err := c.Sentinels(ctx, SentinelMasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: sentinels: %w", sn.Addr, err)
			}
			if len(sentinels) != len(s.Sentinels)-1 {
				return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", sn.Addr, len(sentinels), len(s.Sentinels)-1)
			}
			return c.CkQuorum(ctx, SentinelMasterName).Err()
		}()
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// replicaInSync reports whether the server at addr is a replica whose link to its master is up.
func replicaInSync(ctx context.Context, addr string) error {
	c := nodeClient(addr)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	f := infoFields(info)
	if f["role"] != "slave" || f["master_link_status"] != "up" {
		return fmt.Errorf("%s: role:%s master_link_status:%s", addr, f["role"], f["master_link_status"])
	}
	return nil
}

// SentinelAddrs returns the "127.0.0.1:port" addresses of the three sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// FailoverOptions returns options for redis.NewFailoverClient that name every sentinel and
// the master, for tests that want to adjust them.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: s.SentinelAddrs()}
}

// MasterAddr returns the master's address on which a majority of the sentinels agree, or an
// error when they do not agree (yet). After a failover it is the promoted replica's.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	return s.masterAddr(ctx, len(s.Sentinels)/2+1)
}

// MasterAddrOfAll returns the master's address when every sentinel reports it, or an error.
// A failover client asks one sentinel, so until every sentinel reports the promoted replica a
// client may still be sent to the old master's address.
func (s *Sentinel) MasterAddrOfAll(ctx context.Context) (string, error) {
	return s.masterAddr(ctx, len(s.Sentinels))
}

// masterAddr returns the master's address that at least quorum sentinels report.
func (s *Sentinel) masterAddr(ctx context.Context, quorum int) (string, error) {
	votes := map[string]int{}
	var errs []error
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
		addr, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s: %w", sn.Addr, err))
			continue
		}
		votes[net.JoinHostPort(addr[0], addr[1])]++
	}
	for addr, n := range votes {
		if n >= quorum {
			return addr, nil
		}
	}
	return "", fmt.Errorf("redistest: the sentinels do not agree on a master: %v %w", votes, errors.Join(errs...))
}

// RestartAsReplica restarts the data server n (killed by the test) as a replica of the master
// at masterAddr, as an operator brings a failed master back after a failover. Restarted as it
// was, a master without persistence would come back empty and still a master, and the
// sentinels, which list it as a replica by then, could promote it in a second failover.
func (s *Sentinel) RestartAsReplica(n *Server, masterAddr string) error {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return err
	}
	n.Stop()
	n.mu.Lock()
	n.args = append(slices.Clone(n.args), "--replicaof", host, port)
	n.mu.Unlock()
	return n.start()
}

// Node returns the data server (master or replica) listening on addr, or nil.
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range []*Server{s.Master, s.Replica} {
		if n != nil && n.Addr == addr {
			return n
		}
	}
	return nil
}

// logLogs logs what every sentinel wrote to its log, for a test that failed.
func (s *Sentinel) logLogs(t testing.TB) {
	for _, sn := range s.Sentinels {
		log, err := os.ReadFile(filepath.Join(sn.Dir, "redis.log"))
		if err != nil {
			continue
		}
		t.Logf("sentinel %s log:\n%s", sn.Addr, log)
	}
}

// Close stops every process. It is idempotent.
func (s *Sentinel) Close() {
	var wg sync.WaitGroup
	for _, n := range append([]*Server{s.Master, s.Replica}, s.Sentinels...) {
		if n != nil {
			wg.Add(1)
			go func() { defer wg.Done(); n.Stop() }()
		}
	}
	wg.Wait()
}
