package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 5))
	refunds := 0
	for trace := 0; trace < 30; trace++ {
		n := 2 + r.IntN(3)
		reqs := make([]store.Request, n)
		for i := range reqs {
			var lim algo.Limit
			switch r.IntN(4) {
			case 0:
				lim = algo.WindowCounter{Slice: 100 * time.Millisecond, Limits: []algo.Window{{Count: 1 + r.Int64N(6), Window: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond}}}
			case 1:
				lim = algo.GCRA{Burst: r.Int64N(4), Count: 1 + r.Int64N(5), Period: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}
			default:
				l := algo.SlidingLog{Mode: algo.Mode(r.IntN(3)), Limits: []algo.Window{{Count: 1 + r.Int64N(6), Window: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}}}
				if r.IntN(2) == 0 {
					l.Buckets = 1 + r.Int64N(5)
				}
				if r.IntN(3) == 0 {
					l.MinGap = time.Duration(r.Int64N(int64(l.Limits[0].Window)))
				}
				lim = l
			}
			key := "wx" + strconv.Itoa(trace) + ":" + strconv.Itoa(i) // a slot each, most likely
			reqs[i] = store.Request{Key: key, Tag: key, Plan: algo.MustCompile(lim), Shadow: r.IntN(6) == 0}
		}
		at := time.UnixMicro(1800003000334587).Add(time.Duration(r.Int64N(int64(time.Hour))))
		for step := 0; step < 40; step++ {
			at = at.Add(time.Duration(r.Int64N(int64(300 * time.Millisecond))))
			cost := r.Int64N(3)
			for i := range reqs {
				reqs[i].Cost, reqs[i].Time = cost, at
			}
			mr, xr, mp := decideAllOnBoth(t, ms, st, reqs, fmt.Sprintf("trace %d step %d", trace, step))
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
				if l, ok := reqs[i].Plan.Limit().(algo.SlidingLog); (ok && l.Buckets > 0) || isCounter(reqs[i].Plan.Limit()) {
					if x.ResetAfter < m.ResetAfter {
						t.Fatalf("trace %d step %d level %d: cluster reset %v before memory's %v", trace, step, i, x.ResetAfter, m.ResetAfter)
					}
					x.ResetAfter = m.ResetAfter
				}
				if m != x {
					t.Fatalf("trace %d step %d level %d (%s) %+v cost %d:\nmemory  %+v\ncluster %+v", trace, step, i, reqs[i].Key, reqs[i].Plan.Limit(), cost, mr[i], xr[i])
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

// TestWindowedLayout looks at the Redis keys themselves: the exact log's
// members are fixed-width sequence numbers and its size follows its window
// (old members dropped, 16 at a time), the sampled log's and the window
// counter's hashes have a bounded number of fields whatever the traffic,
// and every key expires when its state no longer matters.
func TestWindowedLayout(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	do := func(args ...string) string {
		v, err := srv.Do(args...)
		if err != nil {
			t.Fatal(args, err)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		limit  algo.Limit
		fields int64 // at most, for a hash
		ttl    time.Duration
	}{
		{"exact", algo.SlidingLog{Limits: []algo.Window{{Count: 1000, Window: time.Second}, {Count: 1000, Window: 500 * time.Millisecond}}}, 0, time.Second},
		{"sampled", algo.SlidingLog{Limits: []algo.Window{{Count: 1000, Window: time.Second}, {Count: 1000, Window: 500 * time.Millisecond}}, Buckets: 10, Mode: algo.Uniform}, 2*11 + 2 + 3, 1200 * time.Millisecond},
		{"window_counter", algo.WindowCounter{Slice: 100 * time.Millisecond, Limits: []algo.Window{{Count: 1000, Window: time.Second}, {Count: 1000, Window: 300 * time.Millisecond}}}, 10 + 2 + 1, time.Second},
	} {
		key := "layout:" + tc.name
		name := redis.StateKey(redis.DefaultPrefix, store.Request{Key: key, Plan: algo.MustCompile(tc.limit)})
		at := time.UnixMicro(1800003000334587)
		var last time.Time
		for i := 0; i < 1000; i++ { // 10s of actions, 10ms apart
			at = at.Add(10 * time.Millisecond)
			last = time.Now()
			if r, err := st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(tc.limit), Cost: 1, Time: at}); err != nil || !r.Allowed {
				t.Fatalf("%s: action %d: %+v %v", tc.name, i, r, err)
			}
		}
		// With explicit times a key lives a minute past its state
		// (expire.lua), less the time since the last decision (more than a
		// millisecond on a busy machine).
		ttl, _ := strconv.ParseInt(do("PTTL", name), 10, 64)
		if lo := 60_000 - time.Since(last).Milliseconds(); ttl <= lo || time.Duration(ttl)*time.Millisecond > tc.ttl+time.Minute+time.Millisecond {
			t.Errorf("%s: PTTL %dms, want in (%dms, 1m+%v]", tc.name, ttl, lo, tc.ttl)
		}
		if tc.fields == 0 {
			n, _ := strconv.ParseInt(do("ZCARD", name), 10, 64)
			if n < 100 || n > 100+16 {
				t.Errorf("%s: %d members for 100 actions in the longest window", tc.name, n)
			}
			c := st.Client()
			m, err := c.Do(ctx, c.B().Zrange().Key(name).Min("-1").Max("-1").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if newest := strings.Join(m, ","); newest != "0000000003e8" { // the 1000th action, in fixed-width hex
				t.Errorf("%s: newest member %q, want 0000000003e8", tc.name, newest)
			}
			continue
		}
		if n, _ := strconv.ParseInt(do("HLEN", name), 10, 64); n > tc.fields {
			t.Errorf("%s: %d fields, want at most %d", tc.name, n, tc.fields)
		}
	}
}
