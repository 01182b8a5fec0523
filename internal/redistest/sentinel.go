package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Sentinels is a master, its replica and three sentinels watching them
// (quorum 2, a master is down after 1 s), all on 127.0.0.1.
type Sentinels struct {
	Name      string
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// URL is a Sentinel URL naming every sentinel.
func (s *Sentinels) URL() string {
	u := "redis://" + s.Sentinels[0].Addr + "?master_set=" + s.Name
	for _, x := range s.Sentinels[1:] {
		u += "&addr=" + x.Addr
	}
	return u
}

// StartSentinels starts a master, a replica and three sentinels, and waits
// until the sentinels know both; they are stopped when the test ends.
func StartSentinels(tb testing.TB) *Sentinels {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	s := &Sentinels{Name: "mymaster", Master: Start(tb)}
	_, mport, _ := strings.Cut(s.Master.Addr, ":")
	rport, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	s.Replica = StartOn(tb, rport, "--replicaof", "127.0.0.1", mport)
	waitFor(tb, "the replica to sync", func() bool {
		info, _ := s.Replica.Do("INFO", "replication")
		return strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		port, err := FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 2\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 3000\n",
			s.Name, mport, s.Name, s.Name)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
		x, err := startWith(bin, dir, port, conf, []string{"--sentinel"})
		if err != nil {
			tb.Fatalf("redistest: sentinel: %v", err)
		}
		tb.Cleanup(x.Stop)
		s.Sentinels = append(s.Sentinels, x)
	}
	for _, x := range s.Sentinels {
		waitFor(tb, "a sentinel to know the replica and the other sentinels", func() bool {
			return sentinelField(x, s.Name, "num-slaves") == "1" && sentinelField(x, s.Name, "num-other-sentinels") == "2"
		})
	}
	return s
}

// MasterAddr is the master's address as the first sentinel sees it.
func (s *Sentinels) MasterAddr() string {
	f, err := doArray(s.Sentinels[0].Addr, "SENTINEL", "get-master-addr-by-name", s.Name)
	if err != nil || len(f) < 2 {
		return ""
	}
	return f[0] + ":" + f[1]
}

// sentinelField reads one field of SENTINEL MASTER name.
func sentinelField(x *Server, name, field string) string {
	f, err := doArray(x.Addr, "SENTINEL", "master", name)
	if err != nil {
		return ""
	}
	for i := 0; i+1 < len(f); i += 2 {
		if f[i] == field {
			return f[i+1]
		}
	}
	return ""
}

func waitFor(tb testing.TB, what string, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: waited 30s for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
