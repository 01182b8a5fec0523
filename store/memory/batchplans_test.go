package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// TestDecideAllSharesPlans: a batch decides with its requests' plans,
// shared and unchanged, and allocates nothing for them (bench/NOTES.md
// has what copying them cost). A nary log, which a batch makes binary, is
// copied, and its plan left nary.
func TestDecideAllSharesPlans(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	g, _ := algo.Compile(algo.GCRA{Burst: 1 << 30, Count: 1_000_000, Period: time.Second})
	w, _ := algo.Compile(algo.FixedWindow{Count: 1 << 50, Window: time.Hour})
	nary, _ := algo.Compile(algo.SlidingLog{Limits: []algo.Window{{Count: 2, Window: time.Hour}}, Mode: algo.Nary})
	reqs := []store.Request{{Key: "a", Plan: &g, Cost: 1}, {Key: "b", Plan: &w, Cost: 1}, {Key: "c", Plan: &g, Cost: 1}}
	res := make([]algo.Result, 3)
	st.DecideAll(ctx, reqs, res) // the keys exist from here on
	if n := testing.AllocsPerRun(100, func() {
		if ok, err := st.DecideAll(ctx, reqs, res); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a batch of compiled plans", n)
	}
	// A batch of 3 on a nary log of 2: all or nothing, denied; the plan
	// passed stays nary (alone, it admits part of a cost).
	batch := []store.Request{{Key: "n", Plan: &nary, Cost: 3}, {Key: "b", Plan: &w, Cost: 1}}
	if ok, err := st.DecideAll(ctx, batch, res[:2]); err != nil || ok || res[0].Admitted != 0 {
		t.Fatalf("nary in a batch: %v %v %+v", ok, err, res[0])
	}
	if nary.Limit().(algo.SlidingLog).Mode != algo.Nary {
		t.Fatal("the batch changed the plan passed")
	}
	if r, err := st.Decide(ctx, store.Request{Key: "n", Plan: &nary, Cost: 3}); err != nil || r.Admitted != 2 {
		t.Fatalf("nary alone: %+v %v", r, err)
	}
}
