package conformance

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// racer is a concurrency case: Goroutines each make Attempts decisions of
// Cost at once on one key, and exactly Want must be admitted in total
// (the sum of Result.Admitted).
type racer struct {
	Name       string
	Limit      algo.Limit
	Cost       int64
	Attempts   int
	Want       int64
	Goroutines int
}

// races races 100 goroutines for one key of every algorithm on st
// (coreRacers, windowedRacers), once at a fixed request time and once
// under the store's clock, and with all-or-nothing batches (raceBatches,
// naryInBatch): exactly the limit is admitted. Its keys start with ns.
func races(t *testing.T, st store.Store, ns string) {
	race(t, st, ns, coreRacers)
	race(t, st, ns, windowedRacers)
	t.Run("batch", func(t *testing.T) { raceBatches(t, st, ns) })
	t.Run("nary in a batch", func(t *testing.T) { naryInBatch(t, st, ns) })
}

// race races every case of racers on st, once at a fixed request time and
// once under the store's clock.
func race(t *testing.T, st store.Store, ns string, racers []racer) {
	for _, rc := range racers {
		for _, clock := range []string{"fixed", "store"} {
			t.Run(rc.Name+"/"+clock, func(t *testing.T) {
				req := store.Request{Key: ns + ":race:" + rc.Name + ":" + clock, Plan: algo.MustCompile(rc.Limit), Cost: rc.Cost}
				if clock == "fixed" {
					req.Time = T0
				}
				var admitted, calls atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range rc.Goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for range rc.Attempts {
							r, err := st.Decide(context.Background(), req)
							if err != nil {
								t.Error(err)
								return
							}
							admitted.Add(r.Admitted)
							calls.Add(1)
						}
					}()
				}
				close(start)
				wg.Wait()
				if got := admitted.Load(); got != rc.Want {
					t.Fatalf("%d decisions admitted %d, want exactly %d", calls.Load(), got, rc.Want)
				}
			})
		}
	}
}

// raceBatches races 100 goroutines making all-or-nothing
// decisions over a nary sliding log (binary in a batch) and a window
// counter: exactly the smaller limit passes, and each level records just
// that.
func raceBatches(t *testing.T, st store.Store, ns string) {
	log := algo.SlidingLog{Limits: []algo.Window{{Count: 37, Window: time.Hour}}, Mode: algo.Nary}
	wc := algo.WindowCounter{Limits: []algo.Window{{Count: 50, Window: time.Hour}}, Slice: time.Minute}
	reqs := []store.Request{
		{Key: ns + ":race-batch:log", Plan: algo.MustCompile(log), Cost: 1, Time: T0},
		{Key: ns + ":race-batch:wc", Plan: algo.MustCompile(wc), Cost: 1, Time: T0},
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := st.DecideAll(context.Background(), reqs, make([]algo.Result, 2))
			if err != nil {
				t.Error(err)
			}
			if ok {
				passed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := passed.Load(); got != 37 {
		t.Fatalf("%d batches passed, want exactly 37", got)
	}
	for i, want := range []int64{0, 50 - 37} {
		peek := reqs[i]
		peek.Cost = 0
		r, err := st.Decide(context.Background(), peek)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != want {
			t.Fatalf("level %d after the race: remaining %d, want %d", i, r.Remaining, want)
		}
	}
}

// naryInBatch checks that a nary sliding log admits part of a cost in
// Decide, but acts as binary in a DecideAll of several requests: a level
// that could take only part records nothing, and the batch is denied.
func naryInBatch(t *testing.T, st store.Store, ns string) {
	ctx := context.Background()
	nary := algo.SlidingLog{Limits: []algo.Window{{Count: 5, Window: time.Minute}}, Mode: algo.Nary}
	other := algo.GCRA{Burst: 100, Count: 1, Period: time.Second}
	for i, tc := range []struct {
		batch bool
		want  algo.Result
		after int64 // remaining after, by a peek
	}{
		{false, algo.Result{Admitted: 2, Quota: 5, RetryAfter: time.Minute, ResetAfter: time.Minute, DeniedBy: 1}, 0},
		{true, algo.Result{Quota: 5, Remaining: 2, RetryAfter: time.Minute, ResetAfter: time.Minute, DeniedBy: 1}, 2},
	} {
		key := ns + ":nary-batch:" + strconv.Itoa(i)
		first := store.Request{Key: key, Plan: algo.MustCompile(nary), Cost: 3, Time: T0}
		if r, err := st.Decide(ctx, first); err != nil || r.Admitted != 3 {
			t.Fatalf("case %d: first batch of 3: %+v %v", i, r, err)
		}
		req := first
		var got algo.Result
		if tc.batch {
			res := make([]algo.Result, 2)
			ok, err := st.DecideAll(ctx, []store.Request{req, {Key: key + ":other", Plan: algo.MustCompile(other), Cost: 3, Time: T0}}, res)
			if err != nil || ok {
				t.Fatalf("case %d: batch pass %v err %v, want denied", i, ok, err)
			}
			got = res[0]
			if res[1].Admitted != 0 || res[1].Remaining != 101 {
				t.Fatalf("case %d: the other level %+v recorded something", i, res[1])
			}
		} else {
			var err error
			if got, err = st.Decide(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if got != tc.want {
			t.Fatalf("case %d (batch %v): second batch of 3:\n got %s\nwant %s", i, tc.batch, format(got), format(tc.want))
		}
		peek := first
		peek.Cost = 0
		if r, err := st.Decide(ctx, peek); err != nil || r.Remaining != tc.after {
			t.Fatalf("case %d: remaining after %+v %v, want %d", i, r, err, tc.after)
		}
	}
}
