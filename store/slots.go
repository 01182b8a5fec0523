package store

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/algo"
)

// DecideSlots applies op, a verb of concurrency slots (algo.Concurrency),
// to reqs on any store, as one DecideAll in which every concurrency level
// acts for permit (algo.ForPermit). A plain Decide or DecideAll of a
// concurrency limit is an Acquire for no permit.
//
//   - algo.Acquire decides reqs all or nothing as DecideAll does, each
//     concurrency level taking its Cost in slots under permit (0: for no
//     permit, freed by a Release without one or when the hold ends). An
//     acquire under a permit a level already holds renews it there and
//     takes nothing more.
//   - algo.Renew renews the hold of permit's slots on every request, each
//     of a concurrency limit: it runs the limit's HoldFor from the
//     request's Time. A level that no longer holds the permit is denied,
//     with RetryAfter algo.Never, and then no level is renewed.
//   - algo.Release gives back permit's slots on every request, each of a
//     concurrency limit; with permit 0, Cost units of the holders without
//     a permit, the earliest hold first. results[i].Admitted is how many
//     units request i freed (0 for a permit that held none there: a
//     release is idempotent).
func DecideSlots(ctx context.Context, st Store, op algo.SlotOp, reqs []Request, permit int64, results []algo.Result) (bool, error) {
	b, _ := slotBufs.Get().(*slotBuf)
	if b == nil {
		b = new(slotBuf)
	}
	defer b.put()
	b.reqs = append(b.reqs[:0], reqs...)
	b.plans = slices.Grow(b.plans[:0], len(reqs))[:len(reqs)]
	for i, r := range reqs {
		if r.Plan == nil || r.Plan.Kind() != algo.KindConcurrency {
			if op == algo.Acquire {
				continue // a rate level of an acquire: decided as usual
			}
			return false, fmt.Errorf("%w: request %d: a %v of slots needs a concurrency limit", ErrBadRequest, i, op)
		}
		b.plans[i] = *r.Plan
		if err := algo.ForPermit(&b.plans[i], permit, op); err != nil {
			return false, fmt.Errorf("%w: request %d: %w", ErrBadRequest, i, err)
		}
		b.reqs[i].Plan = &b.plans[i]
	}
	return st.DecideAll(ctx, b.reqs, results)
}

// slotBufs holds the requests and plans of DecideSlots' calls, which a
// store reads only during the call (store.Store).
var slotBufs sync.Pool

type slotBuf struct {
	reqs  []Request
	plans []algo.Plan
}

// put clears b's requests, so that the pool holds no key, and gives it back.
func (b *slotBuf) put() {
	clear(b.reqs)
	slotBufs.Put(b)
}
