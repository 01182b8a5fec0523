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

// Cluster is a running Redis Cluster of three masters and no replicas.
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
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli is not installed (apt-get install -y redis-tools): %v", err)
	}
	c := &Cluster{}
	addrs := make([]string, 3)
	for i := 0; i < 3; i++ {
		port, err := clusterPort()
		if err != nil {
			tb.Fatal(err)
		}
		n := StartOn(tb, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		c.Nodes = append(c.Nodes, n)
		addrs[i] = n.Addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok within 20s: %q %v", n.Addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
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
