package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// NodeTimeout is each node's cluster-node-timeout: how long a node may be unreachable before
	// the cluster marks it failed and a replica takes over. Zero means DefaultClusterNodeTimeout.
	NodeTimeout time.Duration
	// ReadyTimeout bounds the whole start-up: processes, cluster creation and convergence.
	// Zero means DefaultClusterReadyTimeout.
	ReadyTimeout time.Duration
	// Extra are further redis-server arguments given to every node.
	Extra []string
}

const (
	// DefaultClusterNodeTimeout is the cluster-node-timeout of a Cluster when ClusterOptions
	// leaves it zero: short, so that a failover test does not wait long.
	DefaultClusterNodeTimeout = 1500 * time.Millisecond
	// DefaultClusterReadyTimeout bounds the start-up of a Cluster when ClusterOptions leaves it
	// zero.
	DefaultClusterReadyTimeout = 30 * time.Second
)

// ClusterMasters and ClusterReplicasPerMaster describe the shape of every Cluster: three
// masters, each with one replica.
const (
	ClusterMasters           = 3
	ClusterReplicasPerMaster = 1
)

// ErrNotInstalled means redis-server or redis-cli is not on the PATH. NewCluster returns it
// (wrapped); StartCluster and SkipIfNotInstalled turn it into a skip, or a failure when
// REDISDELAY_REQUIRE_REDIS is "1".
var ErrNotInstalled = errors.New("redistest: redis-server or redis-cli is not on the PATH")

// Cluster is a real Redis Cluster of three masters and three replicas, six redis-server
// processes on loopback ports, created with `redis-cli --cluster create`. Its methods are safe
// for concurrent use.
type Cluster struct {
	// Nodes are the six servers in the order they were created; with redis-cli's layout the
	// first three start as masters and the last three as their replicas, but failovers change
	// that: ask Masters and ReplicaOf for the current roles.
	Nodes []*Server

	mu     sync.Mutex
	killed map[string]bool
	dir    string
}

// StartCluster starts a Cluster and tears it down when the test ends. Like Start, it skips the
// test when redis-server or redis-cli is missing, or fails it when REDISDELAY_REQUIRE_REDIS=1.
// Start-up takes one to a few seconds, so tests that only need some cluster should share one
// (see NewCluster); a test that kills nodes needs its own.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	SkipIfNotInstalled(t)
	c, err := NewCluster(opts)
	if err != nil {
		t.Fatalf("start Redis Cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// SkipIfNotInstalled skips t when redis-server or redis-cli is not on the PATH, or fails it when
// REDISDELAY_REQUIRE_REDIS is "1".
func SkipIfNotInstalled(t testing.TB) {
	t.Helper()
	Binary(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-cli is not on the PATH and %s=1", RequireEnv)
		}
		skip(t, fmt.Sprintf("redis-cli is not on the PATH; install it (apt-get install redis-tools) or set %s=1 to make this a failure", RequireEnv))
	}
}

// NewCluster starts a Cluster that is not tied to a test, for sharing between the tests of a
// package: the caller must Close it, for example from TestMain after m.Run. It returns an error
// wrapping ErrNotInstalled when redis-server or redis-cli is missing, and on any other failure
// it stops whatever it had started. It returns once every node reports cluster_state:ok with
// all 16384 slots assigned, every node sees three masters with one replica each, and every
// replica is in sync with its master.
func NewCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = DefaultClusterNodeTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultClusterReadyTimeout
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{killed: map[string]bool{}, dir: dir}
	if err := c.start(bin, cli, opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start starts the nodes, creates the cluster with redis-cli and waits until it is ready (see
// checkReady), all within opts.ReadyTimeout.
func (c *Cluster) start(bin, cli string, opts ClusterOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), opts.ReadyTimeout)
	defer cancel()
	if err := c.startNodes(bin, opts); err != nil {
		return err
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(ClusterReplicasPerMaster), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if err := waitUntil(ctx, c.checkReady); err != nil {
		return fmt.Errorf("cluster not ready within %s: %w\nredis-cli output:\n%s", opts.ReadyTimeout, err, out)
	}
	return nil
}

// startNodes starts the cluster's nodes in parallel, each a redis-server in cluster mode, into
// c.Nodes; its error joins those of every node that did not start.
func (c *Cluster) startNodes(bin string, opts ClusterOptions) error {
	const nodes = ClusterMasters * (1 + ClusterReplicasPerMaster)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	c.Nodes = make([]*Server, nodes)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.startNode(bin, i, opts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", i, err))
				return
			}
			c.Nodes[i] = s
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startNode starts node i, retrying a few times in case a free port was taken in between.
func (c *Cluster) startNode(bin string, i int, opts ClusterOptions) (*Server, error) {
	var err error
	for try := 0; try < 3; try++ {
		var busPort int
		busPort, err = FreePort()
		if err != nil {
			continue
		}
		dir := filepath.Join(c.dir, fmt.Sprintf("node%d-%d", i, try))
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		extra := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			// The bus port defaults to port+10000, which may not exist for an ephemeral port.
			"--cluster-port", strconv.Itoa(busPort),
			// Replicas sync at once instead of after the default 5 s batching delay.
			"--repl-diskless-sync-delay", "0",
		}
		var s *Server
		s, err = newServer(bin, dir, Options{Extra: append(extra, opts.Extra...)})
		if err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Addrs returns the "127.0.0.1:port" addresses of all six nodes, killed ones included, in the
// order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, 0, len(c.Nodes))
	for _, s := range c.Nodes {
		if s != nil {
			addrs = append(addrs, s.Addr)
		}
	}
	return addrs
}

// ClientOptions returns options for a ClusterClient that knows every node of the cluster, for
// tests that want to adjust them before calling redis.NewClusterClient.
//
// Note for failover tests: go-redis (v9.23) refreshes its slot map on MOVED, ASK and READONLY
// replies and otherwise only every ClusterStateReloadInterval (default 60 s). A connection
// refused by a killed master does not trigger a refresh, so commands for that master's slots,
// and a Pub/Sub connection that was on it, keep failing until the interval elapses or
// ReloadState is called. Set ClusterStateReloadInterval (for example to 1 s) to model a client
// configured for failover.
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a ClusterClient for the cluster that is closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(c.ClientOptions())
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Node returns the server listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s != nil && s.Addr == addr {
			return s
		}
	}
	return nil
}

// Kill kills the node at addr with SIGKILL, as a crash would, and waits for the process to
// exit. The rest of the cluster notices after the node timeout and, if it was a master, promotes
// its replica. Killing a killed node does nothing.
func (c *Cluster) Kill(addr string) error {
	s := c.Node(addr)
	if s == nil {
		return fmt.Errorf("redistest: %s is not a node of the cluster", addr)
	}
	c.mu.Lock()
	c.killed[addr] = true
	c.mu.Unlock()
	s.Stop()
	return nil
}

// Close kills every node and removes the cluster's files. It is idempotent.
func (c *Cluster) Close() {
	for _, s := range c.Nodes {
		if s != nil {
			s.Stop()
		}
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}
