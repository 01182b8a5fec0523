package memory_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// TestConcurrentBatches: 100 goroutines race with two-level batches that
// share a parent key; no level admits more than its limit.
func TestConcurrentBatches(t *testing.T) {
	st := memory.New()
	defer st.Close()
	parent := store.Request{Key: "p", Plan: algo.MustCompile(algo.GCRA{Burst: 29, Count: 1, Period: time.Hour}), Cost: 1}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 100; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			child := store.Request{Key: "p:" + strconv.Itoa(g%4), Plan: algo.MustCompile(algo.FixedWindow{Count: 10, Window: 1000 * time.Hour}), Cost: 1}
			res := make([]algo.Result, 2)
			ok, err := st.DecideAll(context.Background(), []store.Request{parent, child}, res)
			if err != nil {
				t.Error(err)
			}
			if ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	// Four children of 10 would admit 40; the parent caps them at 30.
	if got := admitted.Load(); got != 30 {
		t.Fatalf("admitted %d, want 30", got)
	}
}

func TestSweepBoundsMemory(t *testing.T) {
	st := memory.New(memory.WithSweepEvery(0))
	defer st.Close()
	t0 := time.UnixMicro(1_800_000_000_000_000)
	lim := algo.GCRA{Burst: 1, Count: 1, Period: time.Second}
	for i := 0; i < 10000; i++ {
		if _, err := st.Decide(context.Background(), store.Request{Key: "k" + strconv.Itoa(i), Plan: algo.MustCompile(lim), Cost: 1, Time: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.Len(); n != 10000 {
		t.Fatalf("Len = %d before expiry, want 10000", n)
	}
	st.Sweep() // nothing has expired yet
	if n := st.Len(); n != 10000 {
		t.Fatalf("Len = %d after an early sweep, want 10000", n)
	}
	// One decision far later in every shard moves the shards' clocks on.
	for i := 0; i < 2000; i++ {
		st.Decide(context.Background(), store.Request{Key: "late" + strconv.Itoa(i), Plan: algo.MustCompile(lim), Cost: 0, Time: t0.Add(time.Hour)})
	}
	st.Sweep()
	if n := st.Len(); n != 0 {
		t.Fatalf("Len = %d after expiry and sweep, want 0 (peeks store nothing)", n)
	}
}

func TestPeekStoresNothing(t *testing.T) {
	st := memory.New()
	defer st.Close()
	r, err := st.Decide(context.Background(), store.Request{Key: "peek", Plan: algo.MustCompile(algo.Gate{Interval: time.Second}), Cost: 0})
	if err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("peek: %+v %v", r, err)
	}
	if st.Len() != 0 {
		t.Fatalf("a peek stored state")
	}
}

func TestBadInput(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ok := algo.GCRA{Burst: 1, Count: 1, Period: time.Second}
	for name, req := range map[string]store.Request{
		"empty key":      {Key: "", Plan: algo.MustCompile(ok), Cost: 1},
		"long key":       {Key: string(make([]byte, store.MaxKeyLen+1)), Plan: algo.MustCompile(ok), Cost: 1},
		"negative cost":  {Key: "k", Plan: algo.MustCompile(ok), Cost: -1},
		"no plan":        {Key: "k", Cost: 1},
		"a zero plan":    {Key: "k", Plan: new(algo.Plan), Cost: 1},
		"before 1970":    {Key: "k", Plan: algo.MustCompile(ok), Cost: 1, Time: time.Unix(-1, 0)},
		"tag not prefix": {Key: "k", Tag: "x", Plan: algo.MustCompile(ok), Cost: 1},
	} {
		if _, err := st.Decide(context.Background(), req); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("%s: err = %v, want ErrBadRequest", name, err)
		}
	}
	for name, lim := range map[string]algo.Limit{
		"zero count":         algo.GCRA{Burst: 1, Count: 0, Period: time.Second},
		"negative burst":     algo.GCRA{Burst: -1, Count: 1, Period: time.Second},
		"zero period":        algo.GCRA{Burst: 1, Count: 1},
		"sub-µs interval":    algo.GCRA{Burst: 1, Count: 2000, Period: time.Millisecond},
		"huge burst":         algo.GCRA{Burst: 1 << 62, Count: 1, Period: time.Second},
		"negative rate":      algo.TokenBucket{Burst: 1, Count: -1, Period: time.Second},
		"zero burst bucket":  algo.TokenBucket{Burst: 0, Count: 1, Period: time.Second},
		"zero window":        algo.FixedWindow{Count: 1},
		"negative limit":     algo.FixedWindow{Count: -1, Window: time.Second},
		"overflowing window": algo.FixedWindow{Count: 1, Window: 1 << 62},
		"negative interval":  algo.Gate{Interval: -time.Second},
	} {
		if _, err := algo.Compile(lim); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("%s: err = %v, want algo.ErrInvalid", name, err)
		}
	}
}

func TestZeroAllocsOnExistingKey(t *testing.T) {
	st := memory.New()
	defer st.Close()
	req := store.Request{Key: "hot", Plan: algo.MustCompile(algo.GCRA{Burst: 1000, Count: 1000, Period: time.Millisecond * 1000}), Cost: 1}
	ctx := context.Background()
	st.Decide(ctx, req)
	if n := testing.AllocsPerRun(1000, func() { st.Decide(ctx, req) }); n != 0 {
		t.Fatalf("%v allocations per decision on an existing key, want 0", n)
	}
	// The limit's value compiled at the call, on the *Store: the plan
	// stays on the caller's stack.
	if n := testing.AllocsPerRun(1000, func() {
		p, _ := algo.Compile(algo.GCRA{Burst: 1000, Count: 1000, Period: time.Second})
		st.Decide(ctx, store.Request{Key: "hot", Plan: &p, Cost: 1})
	}); n != 0 {
		t.Fatalf("%v allocations per decision with the limit compiled in the call, want 0", n)
	}
	var shared store.Store = st
	if n := testing.AllocsPerRun(1000, func() { shared.Decide(ctx, req) }); n != 0 {
		t.Fatalf("%v allocations per decision through store.Store, want 0", n)
	}
}

// TestMemoryFollowsLiveKeys: after 300,000 keys expire and are swept, the
// heap comes back close to where it started (the sweep shrinks an index
// whose keys fell to an eighth of its size).
func TestMemoryFollowsLiveKeys(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	st := memory.New(memory.WithSweepEvery(0))
	defer st.Close()
	base := heap()
	t0 := time.Unix(1_800_000_000, 0)
	lim := algo.GCRA{Burst: 0, Count: 1, Period: time.Second}
	for i := range 300_000 {
		if _, err := st.Decide(context.Background(), store.Request{Key: "k" + strconv.Itoa(i), Plan: algo.MustCompile(lim), Cost: 1, Time: t0}); err != nil {
			t.Fatal(err)
		}
	}
	full := heap()
	// One decision a minute later in every shard moves the shards' clocks
	// past every state's expiry.
	for i := range 20_000 {
		st.Decide(context.Background(), store.Request{Key: "late" + strconv.Itoa(i%2000), Plan: algo.MustCompile(lim), Cost: 1, Time: t0.Add(time.Minute)})
	}
	st.Sweep()
	after := heap()
	t.Logf("heap: %d MB empty, %d MB with 300k keys, %d MB after they expired (%d keys left)", base>>20, full>>20, after>>20, st.Len())
	if st.Len() != 2000 {
		t.Errorf("%d keys left, want the 2000 late ones", st.Len())
	}
	if grown, kept := full-base, after-base; kept > grown/4 {
		t.Errorf("after the sweep %d of the %d bytes the keys took are still held", kept, grown)
	}
}

// TestAllowNAgreesWithDecide: on random traces of every kind, with costs
// 0-3, explicit times and a few keys, AllowN on one store admits exactly
// what Decide admits on another, with Decide's Result when asked for it,
// and refuses bad input as Decide does.
func TestAllowNAgreesWithDecide(t *testing.T) {
	ctx := context.Background()
	for _, k := range algo.Kinds() {
		a, d := memory.New(), memory.New()
		r := rand.New(rand.NewPCG(uint64(k), 3))
		at := time.UnixMicro(1_800_000_000_000_000)
		for i := range 2000 {
			at = at.Add(time.Duration(r.Int64N(int64(2 * time.Second))))
			key, cost := "k"+strconv.Itoa(r.IntN(3)), r.Int64N(4)
			want, err := d.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(k.Example()), Cost: cost, Time: at})
			if err != nil {
				t.Fatal(err)
			}
			// Every other step fills a Result in place, which must be Decide's.
			var res algo.Result
			into := &res
			if i%2 == 0 {
				into = nil
			}
			got, err := a.AllowN(ctx, key, algo.MustCompile(k.Example()), at, cost, into)
			if err != nil || got != want.Allowed || into != nil && res != want {
				t.Fatalf("%v step %d: AllowN %v, %v, %+v; Decide %+v", k, i, got, err, res, want)
			}
		}
		a.Close()
		d.Close()
	}
	st := memory.New()
	defer st.Close()
	ok := algo.MustCompile(algo.GCRA{Burst: 1, Count: 1, Period: time.Second})
	for name, c := range map[string]struct {
		key  string
		l    *algo.Plan
		cost int64
		want error
	}{
		"empty key":     {"", ok, 1, store.ErrBadRequest},
		"negative cost": {"k", ok, -1, store.ErrBadRequest},
		"no plan":       {"k", nil, 1, store.ErrBadRequest},
		"a zero plan":   {"k", new(algo.Plan), 1, store.ErrBadRequest},
	} {
		if allowed, err := st.AllowN(ctx, c.key, c.l, time.Time{}, c.cost, nil); allowed || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, %v; want %v", name, allowed, err, c.want)
		}
	}
}

// TestPeekOnUnknownKeyAllocatesNothing: a peek, or a denial, on a key the
// store does not hold leaves nothing behind and allocates nothing.
func TestPeekOnUnknownKeyAllocatesNothing(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim := algo.GCRA{Burst: 1, Count: 1, Period: time.Second}
	peek := store.Request{Key: "nobody", Plan: algo.MustCompile(lim), Cost: 0}
	never := store.Request{Key: "nobody", Plan: algo.MustCompile(lim), Cost: 3}
	if n := testing.AllocsPerRun(100, func() { st.Decide(ctx, peek); st.Decide(ctx, never) }); n != 0 || st.Len() != 0 {
		t.Fatalf("%v allocations, %d keys held", n, st.Len())
	}
}

// TestExactUnderChurn: while goroutines decide on 2000 keys in random
// orders (adding them, so the shards' indexes grow), others add keys that
// expire at once and a sweeper removes them, moving entries within the
// indexes under the readers; every key still admits exactly its limit.
func TestExactUnderChurn(t *testing.T) {
	st := memory.New(memory.WithSweepEvery(0))
	defer st.Close()
	ctx := context.Background()
	const keys, limit, deciders = 2000, 5, 8
	lim := algo.FixedWindow{Count: limit, Window: algo.MaxHorizon}
	at := time.Unix(1_800_000_000/3600*3600, 0).Add(time.Second) // early in a window
	var admitted [keys]atomic.Int64
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(2)
	go func() { // keys that expire at once, and the sweeps that remove them
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			st.Decide(ctx, store.Request{Key: "tmp:" + strconv.Itoa(i%5000), Plan: algo.MustCompile(algo.Gate{Interval: time.Microsecond}), Cost: 1, Time: at})
			if i%500 == 0 {
				st.Sweep()
			}
		}
	}()
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
				st.Sweep()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range deciders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 2 * limit {
				for _, k := range r.Perm(keys) {
					key := "k:" + strconv.Itoa(k)
					var ok bool
					var err error
					switch k % 3 {
					case 0:
						var res algo.Result
						res, err = st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1, Time: at})
						ok = res.Allowed
					case 1:
						ok, err = st.AllowN(ctx, key, algo.MustCompile(lim), at, 1, nil)
					default:
						res := make([]algo.Result, 1)
						ok, err = st.DecideAll(ctx, []store.Request{{Key: key, Plan: algo.MustCompile(lim), Cost: 1, Time: at}}, res)
					}
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						admitted[k].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != limit {
			t.Fatalf("key %d admitted %d, want %d", k, n, limit)
		}
	}
}

// TestBatchWithANewKeyTwice: a DecideAll that names a key the store does
// not hold twice, racing Decides on that key, loses no update (and, under
// -race, shares no state unlocked): the window counts every admitted unit.
func TestBatchWithANewKeyTwice(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim := algo.FixedWindow{Count: 1 << 40, Window: algo.MaxHorizon}
	for i := range 300 {
		key := "dup:" + strconv.Itoa(i)
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g == 0 {
					res := make([]algo.Result, 2)
					req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1}
					if ok, err := st.DecideAll(ctx, []store.Request{req, req}, res); ok && err == nil {
						admitted.Add(2)
					}
					return
				}
				for range 5 {
					if r, err := st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1}); r.Allowed && err == nil {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		r, err := st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 0})
		if err != nil || lim.Count-r.Remaining != admitted.Load() {
			t.Fatalf("%s: the window counts %d, %d were admitted (%v)", key, lim.Count-r.Remaining, admitted.Load(), err)
		}
	}
}

// TestKeysOfEveryLength: keys kept in their entry (up to 32 bytes) and
// keys kept apart alike find their state again, and two keys that differ
// only in their last byte never share one.
func TestKeysOfEveryLength(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim := algo.FixedWindow{Count: 10, Window: algo.MaxHorizon}
	for _, n := range []int{1, 31, 32, 33, 100, store.MaxKeyLen} {
		for _, last := range []byte{'a', 'b'} {
			key := strings.Repeat("k", n-1) + string(last)
			for i := range 3 {
				r, err := st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1})
				if err != nil || r.Remaining != int64(9-i) {
					t.Fatalf("key of %d bytes ending %q, decision %d: %+v, %v", n, last, i, r, err)
				}
			}
		}
	}
}

// TestBatchesInEveryOrder: batches over the same few keys, in every order,
// some with keys the store does not hold yet, race single decisions and
// sweeps; nothing deadlocks, and every key's window counts exactly the
// units admitted on it.
func TestBatchesInEveryOrder(t *testing.T) {
	st := memory.New(memory.WithSweepEvery(0))
	defer st.Close()
	ctx := context.Background()
	lim := algo.FixedWindow{Count: 1 << 40, Window: algo.MaxHorizon}
	plan := algo.MustCompile(lim)
	at := time.Unix(1_800_000_000/3600*3600, 0).Add(time.Second)
	const nkeys = 6
	var admitted [nkeys + 1]atomic.Int64 // the last: keys made fresh in each batch
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 5))
				for i := range 2000 {
					switch g % 4 {
					case 0: // a single decision
						k := r.IntN(nkeys)
						if ok, err := st.AllowN(ctx, "k"+strconv.Itoa(k), plan, at, 1, nil); ok && err == nil {
							admitted[k].Add(1)
						}
					case 1:
						st.Sweep()
					default: // a batch of 3 held keys in any order, and now and then a new one
						perm := r.Perm(nkeys)[:3]
						reqs := make([]store.Request, 0, 4)
						for _, k := range perm {
							reqs = append(reqs, store.Request{Key: "k" + strconv.Itoa(k), Plan: algo.MustCompile(lim), Cost: 1, Time: at})
						}
						if i%5 == 0 {
							reqs = append(reqs, store.Request{Key: "new:" + strconv.Itoa(g) + ":" + strconv.Itoa(i), Plan: algo.MustCompile(lim), Cost: 1, Time: at})
						}
						res := make([]algo.Result, len(reqs))
						ok, err := st.DecideAll(ctx, reqs, res)
						if err != nil || !ok {
							t.Errorf("batch: %v, %v", ok, err)
							return
						}
						for _, k := range perm {
							admitted[k].Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("batches and decisions still running after 2 minutes: a deadlock")
	}
	for k := range nkeys {
		r, err := st.Decide(ctx, store.Request{Key: "k" + strconv.Itoa(k), Plan: algo.MustCompile(lim), Cost: 0, Time: at})
		if err != nil || lim.Count-r.Remaining != admitted[k].Load() {
			t.Errorf("k%d: the window counts %d, %d were admitted (%v)", k, lim.Count-r.Remaining, admitted[k].Load(), err)
		}
	}
}
