package store_test

import (
	"bytes"
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
	req := store.Request{Key: "k", Limit: algo.Gate{Interval: time.Minute}, Cost: 1}
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
	req := store.Request{Key: "k", Limit: algo.Gate{Interval: time.Minute}, Cost: 1}
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
	// On Redis the list lives in its level's Cluster slot.
	if redis.Slot(redis.ConsumersKey("sluice:", "user:alex:trade", "user:alex")) != redis.Slot(redis.KeyName("sluice:", "user:alex:trade", "user:alex")) {
		t.Error("the consumers list is in another slot than its key")
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

// TestConsumerLogBytesBound: the memory store's lists stay within their
// byte bound, dropping (and saying how many) what does not fit.
func TestConsumerLogBytesBound(t *testing.T) {
	st := memory.New(memory.WithConsumerBytes(64 << 10))
	defer st.Close()
	entry := bytes.Repeat([]byte("x"), 1024)
	var dropped int
	for i := range 1000 {
		err := st.PushConsumers(context.Background(), []store.Consumed{{Key: "k" + strconv.Itoa(i), Entry: entry}}, 20, time.Hour)
		var d *store.DroppedError
		if errors.As(err, &d) {
			dropped += d.Dropped
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// 64 KiB holds about 58 lists of one 1 KiB entry with their overhead.
	if dropped < 900 || dropped > 960 {
		t.Errorf("dropped %d of 1000 entries of 1 KiB within 64 KiB", dropped)
	}
	if got, _ := st.Consumers(context.Background(), "k0", ""); len(got) != 1 {
		t.Errorf("the first list: %d entries", len(got))
	}
	if got, _ := st.Consumers(context.Background(), "k999", ""); len(got) != 0 {
		t.Errorf("a list past the bound: %d entries", len(got))
	}
}

func TestCompileAll(t *testing.T) {
	lim := algo.Gate{Interval: time.Second}
	t0 := time.Unix(1800000000, 0)
	reqs := []store.Request{{Key: "a", Limit: lim, Time: t0}, {Key: "b", Limit: lim, Time: t0.Add(time.Second)}}
	scratch, plans := make([]algo.Plan, 2), make([]*algo.Plan, 2)
	if err := store.CompileAll(nil, reqs, make([]algo.Result, 2), scratch, plans); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("requests with different times: %v", err)
	}
	reqs[1].Time = t0
	if err := store.CompileAll(nil, reqs, make([]algo.Result, 1), scratch, plans); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("too few results: %v", err)
	}
	if err := store.CompileAll(nil, reqs, make([]algo.Result, 2), scratch, plans[:1]); err == nil {
		t.Error("too few plans were accepted")
	}
	if err := store.CompileAll(nil, nil, nil, nil, nil); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("an empty batch: %v", err)
	}
	var cache algo.Plans
	for _, c := range []*algo.Plans{nil, &cache, &cache} { // compiled, then cached
		clear(plans)
		if err := store.CompileAll(c, reqs, make([]algo.Result, 2), scratch, plans); err != nil {
			t.Fatal(err)
		}
		for i := range plans {
			if plans[i].Limit() != lim {
				t.Fatalf("plan %d is of %v", i, plans[i].Limit())
			}
		}
	}
	// A plan passed as the limit is used as it is, but for a nary log,
	// whose batch plan is a binary copy: the plan passed is unchanged.
	nary, _ := algo.Compile(algo.SlidingLog{Limits: []algo.Window{{Limit: 3, Window: time.Second}}, Mode: algo.Nary})
	gate, _ := algo.Compile(lim)
	both := []store.Request{{Key: "a", Limit: &gate, Time: t0}, {Key: "b", Limit: &nary, Time: t0}}
	for _, sc := range [][]algo.Plan{scratch, nil} { // nil: a new plan where one is needed
		clear(plans)
		if err := store.CompileAll(&cache, both, make([]algo.Result, 2), sc, plans); err != nil {
			t.Fatal(err)
		}
		if plans[0] != &gate || plans[1] == &nary || plans[1].Limit().(algo.SlidingLog).Mode != algo.Binary || nary.Limit().(algo.SlidingLog).Mode != algo.Nary {
			t.Fatalf("batch plans %p %p (gate %p, nary %p): %v, nary now %v", plans[0], plans[1], &gate, &nary, plans[1].Limit(), nary.Limit())
		}
	}
	reqs[1].Tag = "x"
	if err := store.CompileAll(nil, reqs, make([]algo.Result, 2), scratch, plans); !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "request 1") {
		t.Errorf("a tag that is not a prefix: %v", err)
	}
}

// TestCached: a request whose limit has a plan already gets that plan,
// checked as Compile checks; one without gets none.
func TestCached(t *testing.T) {
	var c algo.Plans
	lim := algo.GCRA{Burst: 1, Count: 1, Period: time.Second}
	r := store.Request{Key: "k", Limit: lim, Cost: 1}
	if p, err := store.Cached(&c, &r); p != nil || err != nil {
		t.Fatalf("a limit never seen: %v, %v", p, err)
	}
	var scratch algo.Plan
	want, _ := c.Compile(lim, &scratch)
	if p, err := store.Cached(&c, &r); p != want || err != nil {
		t.Errorf("a limit seen: %p, %v; want the cache's %p", p, err, want)
	}
	own, _ := algo.Compile(lim)
	r.Limit = &own
	if p, err := store.Cached(&c, &r); p != &own || err != nil {
		t.Errorf("a *Plan: %p, %v; want itself", p, err)
	}
	r.Cost = -1
	if _, err := store.Cached(&c, &r); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("a negative cost: %v", err)
	}
	r.Cost, r.Key = 1, ""
	if _, err := store.Cached(&c, &r); err == nil {
		t.Error("an empty key was accepted")
	}
}
