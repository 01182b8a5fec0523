package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a running Redis Cluster of three masters and, from
// StartClusterWithReplicas, a replica of each.
type Cluster struct {
	Nodes []*Server
}

// URL is a rueidis seed-list URL naming every node.
func (c *Cluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr
	for i, n := range c.Nodes[1:] {
		if i == 0 {
			u += "?addr=" + n.Addr
		} else {
			u += "&addr=" + n.Addr
		}
	}
	return u
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create`, waits until every node
// reports cluster_state:ok, and stops them all when the test ends.
func StartCluster(tb testing.TB) *Cluster { return startCluster(tb, 0) }

// StartClusterWithReplicas starts three masters and three replicas (a
// node is failed after 1 s without an answer), as StartCluster does.
func StartClusterWithReplicas(tb testing.TB) *Cluster { return startCluster(tb, 1) }

func startCluster(tb testing.TB, replicas int) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli is not installed (apt-get install -y redis-tools): %v", err)
	}
	c := &Cluster{}
	n := 3 * (1 + replicas)
	timeout := "5000"
	if replicas > 0 {
		timeout = "1000"
	}
	addrs := make([]string, n)
	for i := 0; i < n; i++ {
		port, err := clusterPort()
		if err != nil {
			tb.Fatal(err)
		}
		n := StartOn(tb, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", timeout,
			"--repl-diskless-sync-delay", "0")
		c.Nodes = append(c.Nodes, n)
		addrs[i] = n.Addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && (replicas == 0 || strings.Contains(info, "cluster_known_nodes:6")) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok within 30s: %q %v", n.Addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A replica that has not finished its first sync cannot take over.
	for _, n := range c.Nodes {
		waitFor(tb, "replicas to sync with their masters", func() bool {
			info, err := n.Do("INFO", "replication")
			return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
		})
	}
	return c
}

// clusterPort finds a free port whose cluster bus port (port+10000) is
// free too.
func clusterPort() (int, error) {
	for i := 0; i < 100; i++ {
		p, err := FreePort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

// MasterOf returns the node that serves a hash slot now, as node from sees it
// (a node of c that is up), or nil.
func (c *Cluster) MasterOf(from *Server, hashSlot int) *Server {
	nodes, err := from.Do("CLUSTER", "NODES")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= hashSlot && hashSlot <= b {
				for _, n := range c.Nodes {
					if n.Addr == addr {
						return n
					}
				}
			}
		}
	}
	return nil
}
