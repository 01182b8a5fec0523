package redis_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// TestWindowedConcurrency: 100 goroutines race for one key of each
// sliding log mode and a window counter; exactly the limit is admitted.
func TestWindowedConcurrency(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	conformance.RunConcurrency(t, st, "redis", conformance.WindowedRacers)
	t.Run("batch", func(t *testing.T) { conformance.RunBatchConcurrency(t, st, "redis") })
	t.Run("nary in a batch", func(t *testing.T) { conformance.RunNaryInBatch(t, st, "redis") })
}

// TestWindowedCluster plays random decisions spanning Cluster slots (so
// groups that reserved are refunded when another slot denies) with the
// windowed algorithms, against the memory store. A refund leaves a sampled
// log's or window counter's clock where the refunded decision moved it,
// which may only lengthen their ResetAfter; every other field must agree.
func TestWindowedCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	st, err := redis.Open(context.Background(), c.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ms := memory.New()
	defer ms.Close()
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 5))
	refunds := 0
	for trace := 0; trace < 30; trace++ {
		n := 2 + r.IntN(3)
		reqs := make([]sluice.Request, n)
		for i := range reqs {
			var lim algo.Limit
			switch r.IntN(4) {
			case 0:
				lim = algo.WindowCounter{Slice: 100 * time.Millisecond, Limits: []algo.Window{{Limit: 1 + r.Int64N(6), Window: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond}}}
			case 1:
				lim = algo.GCRA{Burst: r.Int64N(4), Count: 1 + r.Int64N(5), Period: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}
			default:
				l := algo.SlidingLog{Mode: algo.Mode(r.IntN(3)), Limits: []algo.Window{{Limit: 1 + r.Int64N(6), Window: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}}}
				if r.IntN(2) == 0 {
					l.Buckets = 1 + r.Int64N(5)
				}
				if r.IntN(3) == 0 {
					l.MinGap = time.Duration(r.Int64N(int64(l.Limits[0].Window)))
				}
				lim = l
			}
			key := "wx" + strconv.Itoa(trace) + ":" + strconv.Itoa(i) // a slot each, most likely
			reqs[i] = sluice.Request{Key: key, Tag: key, Limit: lim, Shadow: r.IntN(6) == 0}
		}
		at := time.UnixMicro(1800003000334587).Add(time.Duration(r.Int64N(int64(time.Hour))))
		for step := 0; step < 40; step++ {
			at = at.Add(time.Duration(r.Int64N(int64(300 * time.Millisecond))))
			cost := r.Int64N(3)
			for i := range reqs {
				reqs[i].Cost, reqs[i].Time = cost, at
			}
			mr, xr := make([]algo.Result, n), make([]algo.Result, n)
			mp, err := ms.DecideAll(ctx, reqs, mr)
			if err != nil {
				t.Fatal(err)
			}
			xp, err := st.DecideAll(ctx, reqs, xr)
			if err != nil {
				t.Fatalf("trace %d step %d: %v", trace, step, err)
			}
			if mp != xp {
				t.Fatalf("trace %d step %d: memory pass %v, cluster pass %v", trace, step, mp, xp)
			}
			if !mp {
				for i := range reqs {
					if xr[i].Allowed && !reqs[i].Shadow {
						refunds++ // an allowed level of a denied batch: refunded if its slot reserved
						break
					}
				}
			}
			for i := range reqs {
				m, x := mr[i], xr[i]
				if l, ok := reqs[i].Limit.(algo.SlidingLog); (ok && l.Buckets > 0) || isCounter(reqs[i].Limit) {
					if x.ResetAfter < m.ResetAfter {
						t.Fatalf("trace %d step %d level %d: cluster reset %v before memory's %v", trace, step, i, x.ResetAfter, m.ResetAfter)
					}
					x.ResetAfter = m.ResetAfter
				}
				if m != x {
					t.Fatalf("trace %d step %d level %d (%s) %+v cost %d:\nmemory  %+v\ncluster %+v", trace, step, i, reqs[i].Key, reqs[i].Limit, cost, mr[i], xr[i])
				}
			}
		}
	}
	if refunds < 10 {
		t.Fatalf("only %d denied batches with an allowed level: the refund path was hardly exercised", refunds)
	}
}

func isCounter(l algo.Limit) bool {
	_, ok := l.(algo.WindowCounter)
	return ok
}
