package conformance_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

func stores(t *testing.T) map[string]store.Store {
	srv := redistest.Start(t)
	rs, err := redis.Open(context.Background(), srv.URL(), redis.Options{Timeout: time.Minute}) // not the default second: a busy machine can outlast it
	if err != nil {
		t.Fatal(err)
	}
	ms := memory.New()
	t.Cleanup(func() { rs.Close(); ms.Close() })
	return map[string]store.Store{"memory": ms, "redis": rs}
}

// TestTraces runs conformance.Run, every trace and race, on the memory
// store and on Redis.
func TestTraces(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) { conformance.Run(t, st, "traces") })
	}
}

// randomSource returns a test's random numbers, from a seed it logs: the
// clock's, or SLUICE_SEED's to replay a failing run. stream tells the
// tests' sequences apart.
func randomSource(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("SLUICE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// nextTime returns the next time of a trace after at: one time in eight
// up to back earlier, but no earlier than floor (a clock stepping back),
// else up to fwd later.
func nextTime(r *rand.Rand, at, floor time.Time, back, fwd time.Duration) time.Time {
	if r.IntN(8) == 0 {
		at = at.Add(-time.Duration(r.Int64N(int64(back))))
		if at.Before(floor) {
			at = floor
		}
		return at
	}
	return at.Add(time.Duration(r.Int64N(int64(fwd))))
}

// decideOnBoth decides req on the memory store and on Redis and fails t,
// saying where, unless both give the same result, which it returns.
func decideOnBoth(t *testing.T, ctx context.Context, st map[string]store.Store, req store.Request, where string) algo.Result {
	t.Helper()
	m, err := st["memory"].Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	x, err := st["redis"].Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if m != x {
		t.Fatalf("%s %+v cost %d at %v:\nmemory %s\n redis %s", where, req.Plan.Limit(), req.Cost, req.Time.Sub(conformance.T0), conformance.Format(m), conformance.Format(x))
	}
	return m
}

// randomLimit returns a limit of each algorithm in turn with random,
// small parameters so that traces cross their boundaries often.
func randomLimit(r *rand.Rand, i int) algo.Limit {
	d := func(max int) time.Duration { return time.Duration(1+r.IntN(max)) * 100 * time.Millisecond }
	switch i % 4 {
	case 0:
		return algo.GCRA{Burst: r.Int64N(5), Count: 1 + r.Int64N(10), Period: d(30)}
	case 1:
		return algo.TokenBucket{Burst: 1 + r.Int64N(8), Count: 1 + r.Int64N(10), Period: d(30)}
	case 2:
		return algo.FixedWindow{Count: 1 + r.Int64N(8), Window: d(30)}
	default:
		return algo.Gate{Interval: d(20)}
	}
}

// TestStoresAgree plays random traces on both stores, with times that
// sometimes step back (a clock corrected, a failover to a server whose
// clock is behind), and requires every result to be identical. A time
// steps back no further than the expiry of a state the memory store may
// have dropped (see TestWindowedStoresAgree).
func TestStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 7)
	ctx := context.Background()
	g := newTTLGuard(st)
	for trace := 0; trace < 40; trace++ {
		lim := randomLimit(r, trace)
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		key := "agree:" + strconv.Itoa(trace)
		gen := 0
		var floor time.Time
		for step := 0; step < 60; step++ {
			at = nextTime(r, at, floor, 1500*time.Millisecond, 700*time.Millisecond)
			if !g.ok(t, at, store.Request{Key: key, Plan: algo.MustCompile(lim)}) {
				gen++
				key = "agree:" + strconv.Itoa(trace) + "." + strconv.Itoa(gen)
				floor = time.Time{}
			}
			if e, ok := g.expire[key]; ok && !at.Before(e) && e.After(floor) {
				floor = e
			}
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: r.Int64N(4), Time: at}
			m := decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d", trace, step))
			g.saw(key, at, m)
		}
	}
}

// TestStoresAgreeOnBatches plays random all-or-nothing batches of one to
// four levels, some of them shadow, on both stores and requires identical
// results and outcomes.
func TestStoresAgreeOnBatches(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 11)
	ctx := context.Background()
	for trace := 0; trace < 30; trace++ {
		n := 1 + r.IntN(4)
		reqs := make([]store.Request, n)
		for i := range reqs {
			reqs[i] = store.Request{
				Key:    "batch:" + strconv.Itoa(trace) + ":" + strconv.Itoa(i),
				Plan:   algo.MustCompile(randomLimit(r, r.IntN(4))),
				Shadow: r.IntN(5) == 0,
			}
		}
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		for step := 0; step < 50; step++ {
			at = at.Add(time.Duration(r.Int64N(int64(500 * time.Millisecond))))
			cost := r.Int64N(3)
			for i := range reqs {
				reqs[i].Cost, reqs[i].Time = cost, at
			}
			decideAllOnBoth(t, ctx, st, reqs, fmt.Sprintf("trace %d step %d", trace, step))
		}
	}
}

// decideAllOnBoth runs one DecideAll on the memory and the Redis store,
// fails unless both give the same outcome and results, and returns the
// results.
func decideAllOnBoth(t *testing.T, ctx context.Context, st map[string]store.Store, reqs []store.Request, where string) []algo.Result {
	t.Helper()
	mr, xr := make([]algo.Result, len(reqs)), make([]algo.Result, len(reqs))
	mp, err := st["memory"].DecideAll(ctx, reqs, mr)
	if err != nil {
		t.Fatal(err)
	}
	xp, err := st["redis"].DecideAll(ctx, reqs, xr)
	if err != nil {
		t.Fatal(err)
	}
	if mp != xp {
		t.Fatalf("%s: memory pass %v, redis pass %v", where, mp, xp)
	}
	for i := range reqs {
		if mr[i] != xr[i] {
			t.Fatalf("%s level %d %+v cost %d:\nmemory %s\n redis %s", where, i, reqs[i].Plan.Limit(), reqs[i].Cost, conformance.Format(mr[i]), conformance.Format(xr[i]))
		}
	}
	return mr
}

// TestAllOrNothing: a denied level records nothing at any level, so a
// denied trade does not eat the user's quota.
func TestAllOrNothing(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			user := store.Request{Key: "aon:user:alex", Tag: "aon:user:alex", Plan: algo.MustCompile(algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}), Cost: 1, Time: conformance.T0}
			trade := store.Request{Key: "aon:user:alex:trade", Tag: "aon:user:alex", Plan: algo.MustCompile(algo.GCRA{Burst: 0, Count: 1, Period: time.Minute}), Cost: 1, Time: conformance.T0}
			res := make([]algo.Result, 2)
			for i, wantPass := range []bool{true, false, false} {
				pass, err := st.DecideAll(ctx, []store.Request{user, trade}, res)
				if err != nil {
					t.Fatal(err)
				}
				if pass != wantPass {
					t.Fatalf("call %d: pass %v, want %v", i, pass, wantPass)
				}
			}
			// The user level was charged once (by the first call) only.
			want := algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 2 * time.Second}
			if res[0] != want {
				t.Fatalf("user level after denied trades: %s, want %s", conformance.Format(res[0]), conformance.Format(want))
			}
			if res[1].Allowed || res[1].RetryAfter != time.Minute {
				t.Fatalf("trade level: %s, want denied with retry 1m", conformance.Format(res[1]))
			}
			// A shadow level's denial does not block.
			trade.Shadow = true
			pass, err := st.DecideAll(ctx, []store.Request{user, trade}, res)
			if err != nil || !pass || res[1].Allowed || res[0].Remaining != 14 {
				t.Fatalf("with shadow trade: pass %v err %v user %s trade %s", pass, err, conformance.Format(res[0]), conformance.Format(res[1]))
			}
		})
	}
}

// TestEveryKindCovered: every algorithm has a hand-checked trace and a
// 100-goroutine race that every store must pass.
func TestEveryKindCovered(t *testing.T) {
	traced, raced := map[algo.Kind]bool{}, map[algo.Kind]bool{}
	for _, tr := range conformance.Traces {
		traced[tr.Limit.Kind()] = true
	}
	for _, r := range conformance.Racers {
		raced[r.Limit.Kind()] = true
	}
	for _, k := range algo.Kinds() {
		if !traced[k] || !raced[k] {
			t.Errorf("%v: trace %v, race %v", k, traced[k], raced[k])
		}
	}
}

// TestChangedAlgorithm: a key whose limit changes algorithm or state
// layout (a policy reload) starts cleanly on both stores, as a fresh key
// would: no error (Redis once answered WRONGTYPE) and no misread state.
func TestChangedAlgorithm(t *testing.T) {
	ctx := context.Background()
	t0 := conformance.T0
	limits := []algo.Limit{
		algo.FixedWindow{Count: 2, Window: time.Hour},
		algo.GCRA{Burst: 1, Count: 1, Period: time.Hour},
		algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Hour}}, Buckets: 10},
		algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Hour}, {Count: 5, Window: 2 * time.Hour}}, Buckets: 10},
		algo.WindowCounter{Limits: []algo.Window{{Count: 4, Window: time.Minute}}},
		algo.Gate{Interval: time.Hour},
		algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Hour}}},
	}
	for name, st := range stores(t) {
		for i, l := range limits {
			at := t0.Add(time.Duration(i) * time.Second)
			got, err := st.Decide(ctx, store.Request{Key: "changing:" + name, Plan: algo.MustCompile(l), Cost: 1, Time: at})
			if err != nil {
				t.Fatalf("%s: limit %d (%v): %v", name, i, l.Kind(), err)
			}
			want, err := st.Decide(ctx, store.Request{Key: "fresh:" + name + ":" + strconv.Itoa(i), Plan: algo.MustCompile(l), Cost: 1, Time: at})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: limit %d (%v) after another: %+v, a fresh key: %+v", name, i, l.Kind(), got, want)
			}
		}
	}
}
