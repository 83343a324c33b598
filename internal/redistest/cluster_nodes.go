package redistest

// What the nodes of a Cluster report: whether the cluster is ready, and which nodes are its
// masters and replicas.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checkReady reports whether the cluster is ready: every node reports cluster_state:ok, all
// slots assigned and all six nodes known, sees three healthy masters with one replica each
// (checkTopology), and every replica's link to its master is up.
func (c *Cluster) checkReady(ctx context.Context) error {
	for _, addr := range c.Addrs() {
		if err := checkNodeReady(ctx, addr, len(c.Nodes)); err != nil {
			return err
		}
	}
	return nil
}

// checkNodeReady reports whether the node at addr, of a cluster of nodes nodes, is ready (see
// checkReady).
func checkNodeReady(ctx context.Context, addr string, nodes int) error {
	cl := nodeClient(addr)
	defer cl.Close()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
	}
	fields := infoFields(info)
	if fields["cluster_state"] != "ok" || fields["cluster_slots_assigned"] != "16384" || fields["cluster_known_nodes"] != strconv.Itoa(nodes) {
		return fmt.Errorf("node %s: cluster_state:%s cluster_slots_assigned:%s cluster_known_nodes:%s",
			addr, fields["cluster_state"], fields["cluster_slots_assigned"], fields["cluster_known_nodes"])
	}
	out, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	if err := checkTopology(parseClusterNodes(out)); err != nil {
		return fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	repl, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	rf := infoFields(repl)
	if rf["role"] == "slave" && rf["master_link_status"] != "up" {
		return fmt.Errorf("replica %s: master_link_status:%s", addr, rf["master_link_status"])
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

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, masterID string
	flags              []string
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

// failed reports whether the cluster considers the node down (or possibly down).
func (n clusterNode) failed() bool { return n.is("fail") || n.is("fail?") || n.is("noaddr") }

// nodes returns CLUSTER NODES as seen by the first node still alive, asked within 5 s.
func (c *Cluster) nodes() ([]clusterNode, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
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
	nodes, err := c.nodes()
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
	nodes, err := c.nodes()
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
