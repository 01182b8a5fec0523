package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// TestSettleOnce: a ticket settles once, on both stores: its changes are
// made the first time, and a second settle, a ticket never issued and an
// expired one change nothing.
func TestSettleOnce(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := st.(store.Settler)
			lim := store.Request{Key: "settle:" + name, Plan: algo.MustCompile(algo.FixedWindow{Count: 10, Window: time.Hour})}
			remaining := func() int64 {
				t.Helper()
				r, err := st.Decide(ctx, lim)
				if err != nil {
					t.Fatal(err)
				}
				return r.Remaining
			}
			charge := lim
			charge.Cost = 8
			if _, err := st.Decide(ctx, charge); err != nil {
				t.Fatal(err)
			}
			tk := store.Request{Key: "settle:" + name + "#t1"}
			if err := s.Issue(ctx, tk, time.Hour); err != nil {
				t.Fatal(err)
			}
			back := lim
			back.Cost = 5
			for i, want := range []bool{true, false} {
				ok, err := s.Settle(ctx, tk, []store.Request{back}, algo.Reward)
				if err != nil || ok != want {
					t.Fatalf("settle %d: %v %v, want %v", i, ok, err, want)
				}
			}
			if r := remaining(); r != 7 {
				t.Fatalf("after one settle giving back 5 of 8: %d remaining, want 7", r)
			}
			if ok, err := s.Settle(ctx, store.Request{Key: "settle:" + name + "#forged"}, []store.Request{back}, algo.Reward); ok || err != nil {
				t.Fatalf("a ticket never issued settled: %v %v", ok, err)
			}
			exp := store.Request{Key: "settle:" + name + "#t2"}
			if err := s.Issue(ctx, exp, store.MinTicket); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * store.MinTicket) // at least this long passes, on any clock
			if ok, err := s.Settle(ctx, exp, []store.Request{back}, algo.Reward); ok || err != nil {
				t.Fatalf("an expired ticket settled: %v %v", ok, err)
			}
			if r := remaining(); r != 7 {
				t.Fatalf("refused settles changed the key: %d remaining, want 7", r)
			}
			// A penalty: the excess of a real cost over its estimate.
			over := store.Request{Key: "settle:" + name + "#t3"}
			s.Issue(ctx, over, time.Hour)
			pen := lim
			pen.Cost = 12
			if ok, err := s.Settle(ctx, over, []store.Request{pen}, algo.Penalize); !ok || err != nil {
				t.Fatalf("penalty settle: %v %v", ok, err)
			}
			if r := remaining(); r != 0 {
				t.Fatalf("after a penalty of 12: %d remaining", r)
			}
			for _, bad := range []struct {
				t   store.Request
				ttl time.Duration
			}{{store.Request{}, time.Hour}, {tk, 0}, {tk, store.MaxTicket + 1}, {store.Request{Key: "x", Time: conformance.T0.AddDate(300, 0, 0)}, time.Hour}} {
				if err := s.Issue(ctx, bad.t, bad.ttl); err == nil {
					t.Errorf("Issue(%+v, %v) accepted", bad.t, bad.ttl)
				}
			}
		})
	}
}
