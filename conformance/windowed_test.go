package conformance_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// Times, windows, buckets, gaps and slices of the windowed traces lie on
// a 100ms grid aligned to the epoch, so that every state's reset is a
// whole number of grid steps away and its Redis TTL at least 100ms: a key
// never expires in Redis (wall clock) while the trace (virtual time) still
// counts it. The traces check the TTL anyway (see ttlGuard).
const grid = 100 * time.Millisecond

// randomWindowed returns a sliding log (every mode, exact or sampled, with
// or without a gap, one to three limits) or a window counter with small
// random parameters, so that traces cross their boundaries often.
func randomWindowed(r *rand.Rand, i int) algo.Limit {
	if i%2 == 0 {
		l := algo.SlidingLog{Mode: algo.Mode(r.IntN(3))}
		for range 1 + r.IntN(3) {
			l.Limits = append(l.Limits, algo.Window{Count: 1 + r.Int64N(8), Window: time.Duration(1+r.IntN(5)) * time.Second})
		}
		if r.IntN(2) == 0 {
			l.Buckets = []int64{1, 2, 4, 5, 10}[r.IntN(5)] // widths on the grid
		}
		if r.IntN(3) == 0 {
			l.MinGap = grid * time.Duration(r.Int64N(int64(l.Limits[0].Window/grid)))
		}
		return l
	}
	slice := []time.Duration{grid, 2 * grid, 5 * grid, 10 * grid}[r.IntN(4)]
	l := algo.WindowCounter{Slice: slice}
	for range 1 + r.IntN(3) {
		l.Limits = append(l.Limits, algo.Window{Count: 1 + r.Int64N(10), Window: slice * time.Duration(1+r.IntN(8))})
	}
	return l
}

// gridStart returns a random start time on the grid.
func gridStart(r *rand.Rand) time.Time {
	return conformance.T0.Truncate(time.Second).Add(grid * time.Duration(r.Int64N(36000)))
}

// ttlGuard tracks, for the keys of a trace, when each state expires in
// virtual time (the time of its last decision plus ResetAfter), and tells
// whether Redis still holds every state the trace counts on with a margin.
// When it does not (the machine stalled for longer than a TTL), the trace
// moves on to fresh keys instead of reporting a difference that is a
// matter of timing.
type ttlGuard struct {
	rs     *redis.Store
	expire map[string]time.Time
}

func newTTLGuard(st map[string]store.Store) *ttlGuard {
	return &ttlGuard{rs: st["redis"].(*redis.Store), expire: map[string]time.Time{}}
}

// ok reports whether the states of the requests' keys that are live at at
// are still in Redis for at least 50ms more.
func (g *ttlGuard) ok(t *testing.T, at time.Time, reqs ...store.Request) bool {
	for _, r := range reqs {
		if e, live := g.expire[r.Key]; live && e.After(at) {
			c := g.rs.Client()
			ms, err := c.Do(context.Background(), c.B().Pttl().Key(redis.StateKey(redis.DefaultPrefix, r)).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if ms < 50 {
				t.Logf("key %s: Redis TTL %dms while the trace still counts it; moving to fresh keys", r.Key, ms)
				return false
			}
		}
	}
	return true
}

// saw notes a decision's result. A state expires at the latest of the
// times its results reported: a fixed window decided at a time the clock
// stepped back to reports its times from its window's start, not from at.
func (g *ttlGuard) saw(key string, at time.Time, r algo.Result) {
	if e := at.Add(r.ResetAfter); r.ResetAfter > 0 && e.After(g.expire[key]) {
		g.expire[key] = e
	}
}

// TestWindowedStoresAgree plays random traces of the windowed algorithms on
// both stores, with times that sometimes go back, and requires identical
// results. A time goes back no further than the expiry of a state the
// memory store has dropped: Redis, whose keys expire by the wall clock,
// would still have it.
func TestWindowedStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 13)
	ctx := context.Background()
	g := newTTLGuard(st)
	for trace := 0; trace < 80; trace++ {
		lim := randomWindowed(r, trace)
		at := gridStart(r)
		gen := 0
		key := "windowed:" + strconv.Itoa(trace)
		var floor time.Time // a time may not go back before it
		for step := 0; step < 80; step++ {
			switch {
			case r.IntN(12) == 0:
				at = at.Add(-grid * time.Duration(r.Int64N(20)))
				if at.Before(floor) {
					at = floor
				}
			case r.IntN(25) == 0:
				at = at.Add(grid * time.Duration(r.Int64N(100)))
			default:
				at = at.Add(grid * time.Duration(r.Int64N(4)))
			}
			if !g.ok(t, at, store.Request{Key: key, Plan: algo.MustCompile(lim)}) {
				gen++
				key = "windowed:" + strconv.Itoa(trace) + "." + strconv.Itoa(gen)
				floor = time.Time{}
			}
			if e, ok := g.expire[key]; ok && !at.Before(e) && e.After(floor) {
				floor = e // the memory store drops the state now
			}
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: r.Int64N(4), Time: at}
			if r.IntN(20) == 0 {
				req.Cost = 5 + r.Int64N(10) // often more than a limit
			}
			m := decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d", trace, step))
			g.saw(key, at, m)
		}
	}
}

// TestWindowedBatchesAgree plays random all-or-nothing batches mixing the
// windowed algorithms with the others, some levels shadow, on both stores.
func TestWindowedBatchesAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 17)
	ctx := context.Background()
	g := newTTLGuard(st)
	for trace := 0; trace < 40; trace++ {
		n := 1 + r.IntN(4)
		reqs := make([]store.Request, n)
		keys := make([]string, n)
		gen := 0
		name := func() {
			for i := range reqs {
				keys[i] = "wbatch:" + strconv.Itoa(trace) + "." + strconv.Itoa(gen) + ":" + strconv.Itoa(i)
				reqs[i].Key = keys[i]
			}
		}
		for i := range reqs {
			var lim algo.Limit
			if r.IntN(4) == 0 {
				lim = randomLimit(r, r.IntN(4))
			} else {
				lim = randomWindowed(r, r.IntN(2))
			}
			reqs[i] = store.Request{Plan: algo.MustCompile(lim), Shadow: r.IntN(5) == 0}
		}
		name()
		at := gridStart(r)
		for step := 0; step < 60; step++ {
			at = at.Add(grid * time.Duration(r.Int64N(5)))
			if !g.ok(t, at, reqs...) {
				gen++
				name()
			}
			cost := r.Int64N(3)
			for i := range reqs {
				reqs[i].Cost, reqs[i].Time = cost, at
			}
			mr := decideAllOnBoth(t, ctx, st, reqs, fmt.Sprintf("trace %d step %d", trace, step))
			for i := range reqs {
				g.saw(keys[i], at, mr[i])
			}
		}
	}
}
