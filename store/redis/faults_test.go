package redis_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

var faultReq = store.Request{Key: "faults", Plan: algo.MustCompile(algo.GCRA{Burst: 1 << 20, Count: 1_000_000, Period: time.Second}), Cost: 1}

// decideWithin decides with a deadline and reports whether it succeeded
// and how long it took.
func decideWithin(st *redis.Store, d time.Duration) (bool, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	_, err := st.Decide(ctx, faultReq)
	return err == nil, time.Since(start)
}

// recovers waits until a decision succeeds and returns how long it took
// (logged: the minute is a hang detector, and each try has a second).
func recovers(t *testing.T, st *redis.Store, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if ok, _ := decideWithin(st, time.Second); ok {
			return time.Since(start)
		}
		if time.Since(start) > waitLimit {
			t.Fatalf("%s: no decision within %v", what, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowAndFlakyRedis puts a TCP proxy (toxiproxy, in the test) between
// the store and Redis that adds latency, then cuts connections: every
// decision returns by its deadline, and decisions are normal again soon
// after the proxy heals.
func TestSlowAndFlakyRedis(t *testing.T) {
	srv := redistest.Start(t)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "redis", "127.0.0.1:0", srv.Addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	st, err := redis.Open(context.Background(), "redis://"+proxy.Listen+"/0", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ok, _ := decideWithin(st, waitLimit); !ok {
		t.Fatal("no decision through the proxy")
	}
	for _, fault := range []struct{ name, toxic string }{
		{"latency", `{"name": "slow", "type": "latency", "stream": "downstream", "attributes": {"latency": 300}}`},
		{"cut", `{"name": "cut", "type": "reset_peer", "stream": "upstream", "attributes": {"timeout": 0}}`},
		{"stall", `{"name": "stall", "type": "timeout", "stream": "upstream", "attributes": {"timeout": 0}}`},
	} {
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(fault.toxic)); err != nil {
			t.Fatal(err)
		}
		var failed int
		var worst time.Duration
		for range 20 {
			ok, took := decideWithin(st, 50*time.Millisecond)
			if !ok {
				failed++
			}
			worst = max(worst, took)
		}
		if failed != 20 { // no reply can come within 50ms of a call through the fault
			t.Errorf("%s: %d of 20 decisions with a 50ms deadline succeeded", fault.name, 20-failed)
		}
		name := strings.SplitN(strings.SplitN(fault.toxic, `"name": "`, 2)[1], `"`, 2)[0]
		if err := proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		back := recovers(t, st, fault.name)
		t.Logf("%s: %d of 20 decisions failed, the slowest returned in %v; normal again %v after the proxy healed", fault.name, failed, worst.Round(time.Millisecond), back.Round(time.Millisecond))
	}
}

// TestRedisKilledAndRestarted kills redis-server under decisions and
// starts it again on the same port (empty: its scripts too), and stops
// and continues it: decisions are normal again once Redis is back (how
// soon is logged; within a second or two on an idle machine), the scripts
// are loaded again, and no goroutine is left behind.
func TestRedisKilledAndRestarted(t *testing.T) {
	before := runtime.NumGoroutine()
	srv := redistest.Start(t)
	port, _ := strconv.Atoi(srv.Addr[strings.LastIndexByte(srv.Addr, ':')+1:])
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var decided, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if ok, _ := decideWithin(st, 50*time.Millisecond); ok {
					decided.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Stop() // SIGKILL
	time.Sleep(500 * time.Millisecond)
	srv = redistest.StartOn(t, port)
	back := recovers(t, st, "after the restart")
	t.Logf("killed and restarted: normal %v after Redis came back", back.Round(time.Millisecond))
	resume := srv.Pause(t)
	time.Sleep(500 * time.Millisecond)
	resume()
	back = recovers(t, st, "after SIGCONT")
	t.Logf("stopped and continued: normal %v after SIGCONT", back.Round(time.Millisecond))
	stop.Store(true)
	wg.Wait()
	st.Close()
	t.Logf("%d decisions, %d failed during the faults", decided.Load(), failed.Load())
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
