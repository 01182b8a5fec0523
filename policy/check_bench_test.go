package policy_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// benchPolicy has a one-level path (solo/<id>) and a three-level path
// (org/<id>/api/trade) with the same GCRA limit at every level, generous
// enough that decisions stay allowed.
const benchPolicy = `schema:
  solo:
    children:
      "*":
        limits: [1000000, 1000000, 1]
  org:
    children:
      "*":
        limits: [1000000, 1000000, 1]
        children:
          api:
            limits: [1000000, 1000000, 1]
            children:
              trade:
                limits: [1000000, 1000000, 1]
`

// BenchmarkCheck measures a Checker.Decide of a Check with one and three levels on the
// memory store (GOMAXPROCS goroutines), a Redis server and a Redis Cluster
// (64 goroutines each, so that round trips overlap), over 1000 callers.
func BenchmarkCheck(b *testing.B) {
	p, err := policy.Parse("bench.yaml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	stores := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"memory", func(b *testing.B) store.Store { return memory.New() }},
		{"redis", func(b *testing.B) store.Store {
			st, err := redis.Open(context.Background(), redistest.Start(b).URL(), redis.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
		{"cluster", func(b *testing.B) store.Store {
			st, err := redis.Open(context.Background(), redistest.StartCluster(b).URL(), redis.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
	}
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
	}
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			st := s.open(b)
			defer st.Close()
			c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
			for _, lv := range []struct {
				name string
				path func(id string) []string
			}{
				{"1level", func(id string) []string { return []string{"solo", id} }},
				{"3levels", func(id string) []string { return []string{"org", id, "api", "trade"} }},
			} {
				paths := make([][]string, len(ids))
				for i, id := range ids {
					paths[i] = lv.path(id)
				}
				b.Run(lv.name, func(b *testing.B) {
					b.ReportAllocs()
					if s.name != "memory" {
						b.SetParallelism(32) // 64 goroutines keep a network store busy
					}
					b.RunParallel(func(pb *testing.PB) {
						var d policy.Decision
						i := 0
						for pb.Next() {
							if err := check(c, context.Background(), time.Time{}, paths[i%len(paths)], 1, &d); err != nil || !d.Allowed {
								b.Fatalf("check: %v %+v", err, d.Summary)
							}
							i++
						}
					})
				})
			}
		})
	}
}

// BenchmarkOverride measures a one-level check on the memory store (on
// Redis with SLUICE_BENCH_REDIS=1; one goroutine, so that the lookup is
// not hidden behind parallel work) with
// no override in force, with 1000 overrides of other keys and 10 globs
// that match none of the keys checked, and with every key checked under
// an exact override: the cost of looking overrides up, in one run. It
// fails unless the store keeps every override set.
func BenchmarkOverride(b *testing.B) {
	p, err := policy.Parse("bench.yaml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
	}
	spec := []algo.Spec{{Algorithm: "gcra", Burst: 1000000, Count: 1000000, Period: time.Second}}
	for _, tc := range []struct {
		name string
		set  []policy.Override
	}{
		{"none", nil},
		{"others", func() (list []policy.Override) {
			for i := range 1000 {
				list = append(list, policy.Override{Node: "solo/*", Key: "solo:other" + strconv.Itoa(i), Limits: spec})
			}
			for i := range 10 { // a factor below 1: the node's own limit is at GCRA's finest
				list = append(list, policy.Override{Node: "solo/*", Key: "solo:trial" + strconv.Itoa(i) + "-*", Factor: 0.5})
			}
			return list
		}()},
		{"in-force", func() (list []policy.Override) {
			for _, id := range ids {
				list = append(list, policy.Override{Node: "solo/*", Key: p.Match([]string{"solo", id}).Hits[0].Key, Limits: spec})
			}
			return list
		}()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var st store.Store = memory.New()
			if os.Getenv("SLUICE_BENCH_REDIS") != "" { // the same on a Redis: a round trip a check
				var err error
				if st, err = redis.Open(ctx, redistest.Start(b).URL(), redis.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			defer st.Close()
			c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
			for _, o := range tc.set {
				if err := c.SetOverride(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
			if got, err := c.Overrides(ctx); err != nil || len(got) != len(tc.set) {
				b.Fatalf("%d overrides set, %d kept (%v)", len(tc.set), len(got), err)
			}
			runtime.GC() // the setting's garbage is not the check's
			paths := make([][]string, len(ids))
			for i, id := range ids {
				paths[i] = []string{"solo", id}
			}
			var d policy.Decision
			i := 0
			for b.Loop() {
				if err := check(c, ctx, time.Time{}, paths[i%len(paths)], 1, &d); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
