package memory_test

import (
	"testing"
	"time"

	"context"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// TestWindowedZeroAllocs: a decision on an existing key allocates nothing
// in steady state, also after its state expired and was reset (the log
// keeps its capacity).
func TestWindowedZeroAllocs(t *testing.T) {
	st := memory.New(memory.WithSweepEvery(0))
	defer st.Close()
	ctx := context.Background()
	for name, lim := range map[string]algo.Limit{
		"exact":          algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}, {Count: 1000, Window: time.Minute}}},
		"sampled":        algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}}, Buckets: 10, Mode: algo.Uniform},
		"window_counter": algo.WindowCounter{Limits: []algo.Window{{Count: 100, Window: time.Second}, {Count: 1000, Window: 10 * time.Second}}, Slice: 100 * time.Millisecond},
	} {
		at := conformance.T0
		req := store.Request{Key: "allocs:" + name, Plan: algo.MustCompile(lim), Cost: 1}
		decide := func() {
			at = at.Add(7919 * time.Microsecond)
			req.Time = at
			if _, err := st.Decide(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		for range 20000 {
			decide()
		}
		if n := testing.AllocsPerRun(1000, decide); n != 0 {
			t.Errorf("%s: %v allocations per decision", name, n)
		}
		at = at.Add(2 * time.Hour) // the state expires and is reset
		if n := testing.AllocsPerRun(1000, decide); n != 0 {
			t.Errorf("%s after a reset: %v allocations per decision", name, n)
		}
	}
}
