package policy_test

import (
	"context"
	"strconv"
	"testing"

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

// BenchmarkCheck measures Checker.Check with one and three levels on the
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
							if err := c.Check(context.Background(), paths[i%len(paths)], 1, &d); err != nil || !d.Allowed {
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
