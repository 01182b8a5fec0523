package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// failover decides req through the store at url 20 times, runs kill,
// and decides until 20 decisions succeeded again (within limit, else
// onTimeout runs and the test fails). It returns how long after kill that
// took and how many decisions erred meanwhile.
func failover(t *testing.T, url string, req store.Request, kill func(), limit time.Duration, onTimeout func()) (time.Duration, int) {
	t.Helper()
	st, err := redis.Open(context.Background(), url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Before the kill a decision has all the time it needs (a busy
	// machine may take more than 200ms); after it, 200ms, so that a call
	// to the dead master does not hold the test up.
	decideWithin := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := st.Decide(ctx, req)
		return err
	}
	decide := func() error { return decideWithin(200 * time.Millisecond) }
	for range 20 {
		if err := decideWithin(waitLimit); err != nil {
			t.Fatalf("before the failover: %v", err)
		}
	}
	kill()
	killed := time.Now()
	errs, ok := 0, 0
	for ok < 20 {
		if time.Since(killed) > limit {
			onTimeout()
			t.Fatalf("no decision %v after the master died (%d errors)", limit, errs)
		}
		if err := decide(); err != nil {
			if errs++; errs%200 == 1 {
				t.Logf("%v: %v", time.Since(killed).Round(time.Millisecond), err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		ok++
	}
	return time.Since(killed), errs
}

var failoverLimit = algo.GCRA{Burst: 1 << 20, Count: 1000, Period: time.Second}

// TestSentinelFailover: deciding through three sentinels, the master is
// killed; the sentinels promote the replica, the client follows, and
// decisions work again (the promoted replica gets the scripts through the
// NOSCRIPT fallback). The decisions that erred during the switch are
// counted and logged.
func TestSentinelFailover(t *testing.T) {
	s := redistest.StartSentinels(t)
	old := s.MasterAddr()
	took, errs := failover(t, s.URL(), store.Request{Key: "failover", Plan: algo.MustCompile(failoverLimit), Cost: 1},
		s.Master.Stop /* SIGKILL */, waitLimit, func() {})
	if now := s.MasterAddr(); now == old || now != s.Replica.Addr {
		t.Errorf("master %s after the failover, was %s; the replica is %s", now, old, s.Replica.Addr)
	}
	t.Logf("decisions again %v after the master died; %d decisions erred meanwhile", took.Round(time.Millisecond), errs)
}

// TestClusterFailover: on a Redis Cluster of three masters and three
// replicas, the master of a key's slot is killed under decisions; its
// replica is promoted, the client follows the new slot map, and decisions
// work again (the promoted replica gets the scripts through the NOSCRIPT
// fallback). The decisions that erred during the switch are counted.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t)
	req := store.Request{Key: "failover:alex", Tag: "failover:alex", Plan: algo.MustCompile(failoverLimit), Cost: 1}
	slot := redis.HashSlot(redis.StateKey(redis.DefaultPrefix, req))
	master := c.MasterOf(c.Nodes[0], slot)
	if master == nil {
		t.Fatal("no master for the key's slot")
	}
	took, errs := failover(t, c.URL(), req, master.Stop /* SIGKILL */, waitLimit, func() {
		for _, n := range c.Nodes {
			info, _ := n.Do("CLUSTER", "INFO")
			t.Logf("%s: %.60q", n.Addr, info)
		}
	})
	var alive *redistest.Server
	for _, n := range c.Nodes {
		if n != master {
			alive = n
			break
		}
	}
	// Decisions resumed once the client saw the promotion; another node
	// may learn of it a little later, by gossip.
	now := c.MasterOf(alive, slot)
	for deadline := time.Now().Add(waitLimit); (now == nil || now == master) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		now = c.MasterOf(alive, slot)
	}
	if now == nil || now == master {
		t.Errorf("the slot's master after the failover, as %s sees it: %v", alive.Addr, now)
	}
	t.Logf("decisions again %v after the slot's master died; %d decisions erred meanwhile", took.Round(time.Millisecond), errs)
}
