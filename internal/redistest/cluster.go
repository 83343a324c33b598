package redistest

import (
	"context"
	"errors"
	"fmt"
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

func (c *Cluster) start(bin, cli string, opts ClusterOptions) error {
	deadline := time.Now().Add(opts.ReadyTimeout)
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
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(ClusterReplicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("cluster not ready within %s: %w\nredis-cli output:\n%s", opts.ReadyTimeout, err, out)
	}
	return nil
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

// waitReady waits until every node reports cluster_state:ok, all slots assigned and all six
// nodes known, sees three healthy masters with one replica each, and every replica's link to
// its master is up.
func (c *Cluster) waitReady(ctx context.Context) error {
	for {
		err := c.checkReady(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) checkReady(ctx context.Context) error {
	want := len(c.Nodes)
	for _, addr := range c.Addrs() {
		cl := nodeClient(addr)
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			_ = cl.Close()
			return fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
		}
		fields := infoFields(info)
		if fields["cluster_state"] != "ok" || fields["cluster_slots_assigned"] != "16384" || fields["cluster_known_nodes"] != strconv.Itoa(want) {
			_ = cl.Close()
			return fmt.Errorf("node %s: cluster_state:%s cluster_slots_assigned:%s cluster_known_nodes:%s",
				addr, fields["cluster_state"], fields["cluster_slots_assigned"], fields["cluster_known_nodes"])
		}
		out, err := cl.ClusterNodes(ctx).Result()
		if err != nil {
			_ = cl.Close()
			return fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
		}
		if err := checkTopology(parseClusterNodes(out)); err != nil {
			_ = cl.Close()
			return fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
		}
		repl, err := cl.Info(ctx, "replication").Result()
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", addr, err)
		}
		rf := infoFields(repl)
		if rf["role"] == "slave" && rf["master_link_status"] != "up" {
			return fmt.Errorf("replica %s: master_link_status:%s", addr, rf["master_link_status"])
		}
	}
	return nil
}

// checkTopology reports whether one node's view of the cluster has the expected shape: every
// node healthy, ClusterMasters masters and each with ClusterReplicasPerMaster replicas.
func checkTopology(nodes []clusterNode) error {
	replicas := map[string]int{}
	masters := 0
	for _, n := range nodes {
		switch {
		case n.failed() || n.is("handshake"):
			return fmt.Errorf("node %s has flags %s", n.addr, strings.Join(n.flags, ","))
		case n.is("master"):
			masters++
		case n.is("slave"):
			replicas[n.masterID]++
		}
	}
	if masters != ClusterMasters {
		return fmt.Errorf("%d masters, want %d", masters, ClusterMasters)
	}
	for _, n := range nodes {
		if n.is("master") && replicas[n.id] != ClusterReplicasPerMaster {
			return fmt.Errorf("master %s has %d replicas, want %d", n.addr, replicas[n.id], ClusterReplicasPerMaster)
		}
	}
	return nil
}

// infoFields parses the "key:value" lines of an INFO or CLUSTER INFO reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// nodeClient is a plain client for one node, for administrative commands.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
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

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, masterID string
	flags              []string
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

// failed reports whether the cluster considers the node down (or possibly down).
func (n clusterNode) failed() bool { return n.is("fail") || n.is("fail?") || n.is("noaddr") }

// nodes returns CLUSTER NODES as seen by the first node still alive.
func (c *Cluster) nodes(ctx context.Context) ([]clusterNode, error) {
	var lastErr error = errors.New("every node was killed")
	for _, addr := range c.Addrs() {
		c.mu.Lock()
		killed := c.killed[addr]
		c.mu.Unlock()
		if killed {
			continue
		}
		cl := nodeClient(addr)
		out, err := cl.ClusterNodes(ctx).Result()
		_ = cl.Close()
		if err != nil {
			lastErr = fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
			continue
		}
		return parseClusterNodes(out), nil
	}
	return nil, lastErr
}

// parseClusterNodes parses the CLUSTER NODES format:
// <id> <ip:port@cport[,hostname]> <flags> <master id or -> <ping-sent> <pong-recv> <epoch> <link> <slot>...
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		nodes = append(nodes, clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), masterID: f[3]})
	}
	return nodes
}

// Masters returns the addresses of the current masters that the cluster does not consider
// failed, sorted, as reported by CLUSTER NODES on a live node. After a failover the promoted
// replica appears here and the killed master does not.
func (c *Cluster) Masters() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var masters []string
	for _, n := range nodes {
		if n.is("master") && !n.failed() {
			masters = append(masters, n.addr)
		}
	}
	slices.Sort(masters)
	return masters, nil
}

// ReplicaOf returns the address of a replica of the master at masterAddr that the cluster does
// not consider failed, from CLUSTER NODES on a live node.
func (c *Cluster) ReplicaOf(masterAddr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.nodes(ctx)
	if err != nil {
		return "", err
	}
	var masterID string
	for _, n := range nodes {
		if n.addr == masterAddr {
			if !n.is("master") {
				return "", fmt.Errorf("redistest: %s is not a master (flags %s)", masterAddr, strings.Join(n.flags, ","))
			}
			masterID = n.id
		}
	}
	if masterID == "" {
		return "", fmt.Errorf("redistest: %s is not a node of the cluster", masterAddr)
	}
	for _, n := range nodes {
		if n.masterID == masterID && n.is("slave") && !n.failed() {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("redistest: master %s has no healthy replica", masterAddr)
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
