package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

func TestOpenByURL(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"", "memory", "memory://"} {
		st, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		if _, ok := st.(*memory.Store); !ok {
			t.Errorf("Open(%q) = %T, want the memory store", url, st)
		}
		st.Close()
	}
	srv := redistest.Start(t)
	st, err := store.Open(ctx, srv.URL(), store.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*redis.Store); !ok {
		t.Errorf("Open(redis) = %T", st)
	}
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.Gate{Interval: time.Minute}), Cost: 1}
	if _, err := st.Decide(ctx, req); err != nil {
		t.Fatal(err)
	}
	if v, err := srv.Do("EXISTS", redis.StateKey("p:", req)); err != nil || v != "1" {
		t.Errorf("the prefix option did not reach the store: EXISTS p:k = %q, %v", v, err)
	}

	_, err = store.Open(ctx, "mongodb://user:secret@h/db", store.Options{})
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "memory or redis://...") {
		t.Errorf("unknown scheme: %v", err)
	}
}

// TestCapabilities: each store says what it can do beside deciding.
func TestCapabilities(t *testing.T) {
	var m any = memory.New()
	defer m.(store.Store).Close()
	if _, ok := m.(store.Pinger); ok {
		t.Error("the memory store claims to ping")
	}
	_, reset := m.(store.Resetter)
	_, consumers := m.(store.ConsumerLog)
	if !reset || !consumers {
		t.Errorf("memory store: Resetter %v, ConsumerLog %v", reset, consumers)
	}
	var r any = new(redis.Store)
	_, ping := r.(store.Pinger)
	_, reset = r.(store.Resetter)
	_, consumers = r.(store.ConsumerLog)
	if !ping || !reset || !consumers {
		t.Errorf("redis store: Pinger %v, Resetter %v, ConsumerLog %v", ping, reset, consumers)
	}
}

// TestBackground: a Redis that is not there yet gives a store that fails
// with ErrNotConnected, then works once Redis is up.
func TestBackground(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	ctx := context.Background()
	if _, err := store.Open(ctx, url, store.Options{}); err == nil {
		t.Fatal("Open without Background succeeded with no server")
	}
	st, err := store.Open(ctx, url, store.Options{Background: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.Gate{Interval: time.Minute}), Cost: 1}
	if _, err := st.Decide(ctx, req); !errors.Is(err, store.ErrNotConnected) {
		t.Fatalf("before Redis: %v", err)
	}
	if err := st.(store.Pinger).Ping(ctx); !errors.Is(err, store.ErrNotConnected) {
		t.Fatalf("ping before Redis: %v", err)
	}
	redistest.StartOn(t, port)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := st.Decide(ctx, req)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrNotConnected) || time.Now().After(deadline) {
			t.Fatalf("after Redis started: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := st.(store.Pinger).Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0": "redis://…@h:1/0",
		"redis://h:1/0":      "redis://h:1/0",
		"memory":             "memory",
	} {
		if got := store.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConsumerLogs: on both stores a list keeps the newest entries first,
// at most max of them, and is per key.
func TestConsumerLogs(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ms := memory.New()
	defer ms.Close()
	for name, cl := range map[string]store.ConsumerLog{"memory": ms, "redis": rs} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var entries []store.Consumed
			for i := range 5 {
				entries = append(entries, store.Consumed{Key: "user:alex", Tag: "user:alex", Entry: []byte(strconv.Itoa(i))})
			}
			entries = append(entries, store.Consumed{Key: "user:bo", Tag: "user:bo", Entry: []byte("b")})
			if err := cl.PushConsumers(ctx, entries, 3, time.Minute); err != nil {
				t.Fatal(err)
			}
			got, err := cl.Consumers(ctx, "user:alex", "user:alex")
			if err != nil || string(join(got)) != "4,3,2" {
				t.Errorf("alex: %q, %v; want 4,3,2", join(got), err)
			}
			got, err = cl.Consumers(ctx, "user:bo", "user:bo")
			if err != nil || string(join(got)) != "b" {
				t.Errorf("bo: %q, %v", join(got), err)
			}
			got, err = cl.Consumers(ctx, "user:nobody", "user:nobody")
			if err != nil || got == nil || len(got) != 0 {
				t.Errorf("nobody: %q, %v; want an empty list", got, err)
			}
		})
	}
}

func join(bs [][]byte) []byte {
	var out []byte
	for i, b := range bs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return out
}

func TestCheckAll(t *testing.T) {
	lim := algo.MustCompile(algo.Gate{Interval: time.Second})
	t0 := time.Unix(1800000000, 0)
	reqs := []store.Request{{Key: "a", Plan: lim, Time: t0}, {Key: "b", Plan: lim, Time: t0.Add(time.Second)}}
	if err := store.ValidateAll(reqs, make([]algo.Result, 2)); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("requests with different times: %v", err)
	}
	reqs[1].Time = t0
	if err := store.ValidateAll(reqs, make([]algo.Result, 1)); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("too few results: %v", err)
	}
	if err := store.ValidateAll(nil, nil); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("an empty batch: %v", err)
	}
	if err := store.ValidateAll(reqs, make([]algo.Result, 2)); err != nil {
		t.Fatal(err)
	}
	reqs[1].Tag = "x"
	if err := store.ValidateAll(reqs, make([]algo.Result, 2)); !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "request 1") {
		t.Errorf("a tag that is not a prefix: %v", err)
	}
	reqs[1].Tag, reqs[1].Plan = "", nil
	if err := store.ValidateAll(reqs, make([]algo.Result, 2)); !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "request 1") {
		t.Errorf("a request without a plan: %v", err)
	}
	reqs[1].Plan, reqs[1].Cost = algo.MustCompile(algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Second}}}), algo.MaxExactCost+1
	if err := store.ValidateAll(reqs, make([]algo.Result, 2)); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("a cost above an exact log's bound: %v", err)
	}
}

// TestRequestsNotKeptPastTheCall: Decide and DecideAll read their requests
// (the slice and its plans) only during the call, on each store: the
// requests and plans are overwritten as soon as each call returns, while
// whatever the store does in the background goes on (the Redis store's
// leases top up on a goroutine of their own), and the race detector
// (./test.sh runs it) reports any read that comes after.
func TestRequestsNotKeptPastTheCall(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	stores := map[string]store.Store{"memory": memory.New()}
	for name, opts := range map[string]redis.Options{"redis": {}, "redis-leases": {LeaseFor: 50 * time.Millisecond}, "redis-cache": {OverLimitCache: 100}} {
		rs, err := redis.Open(ctx, srv.URL(), opts)
		if err != nil {
			t.Fatal(err)
		}
		stores[name] = rs
	}
	limits := []algo.Limit{
		algo.FixedWindow{Count: 1_000_000, Window: time.Hour},
		algo.GCRA{Burst: 3, Count: 3, Period: time.Hour}, // soon denied: the over-limit cache keeps it
		algo.Concurrency{Count: algo.MaxSlots, HoldFor: time.Hour},
	}
	for name, st := range stores {
		defer st.Close()
		for i := range 300 {
			reqs := make([]store.Request, len(limits))
			for j, l := range limits {
				p, err := algo.Compile(l)
				if err != nil {
					t.Fatal(err)
				}
				reqs[j] = store.Request{Key: name + ":" + strconv.Itoa(j) + ":" + strconv.Itoa(i%3), Plan: &p, Cost: 1, Lease: true}
			}
			if _, err := st.DecideAll(ctx, reqs, make([]algo.Result, len(reqs))); err != nil {
				t.Fatal(name, i, err)
			}
			for j := range reqs {
				*reqs[j].Plan = algo.Plan{}
				reqs[j] = store.Request{}
			}
			p, _ := algo.Compile(limits[0])
			req := store.Request{Key: name + ":one", Plan: &p, Cost: 1, Lease: true}
			if _, err := st.Decide(ctx, req); err != nil {
				t.Fatal(name, err)
			}
			p = algo.Plan{}
		}
	}
}
