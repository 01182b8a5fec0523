package policy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Checker checks request paths against the policy a Holder holds, on a
// store: every limit on the path in one all-or-nothing DecideAll (one
// script call per Redis slot involved).
type Checker struct {
	Policy *Holder
	Store  sluice.Store
}

// Check decides a request for path at the store's clock; see CheckAt.
func (c *Checker) Check(ctx context.Context, path []string, cost int64, d *sluice.Decision) error {
	return c.CheckAt(ctx, time.Time{}, path, cost, d)
}

// CheckAt decides a request for path of the given cost at time t (the zero
// Time for the store's clock) and fills d, reusing the capacity of
// d.Levels. A request that matches no level is allowed, or denied with
// RetryAfter Never when the policy says unmatched: deny; its shadow levels
// are still checked and reported.
func (c *Checker) CheckAt(ctx context.Context, t time.Time, path []string, cost int64, d *sluice.Decision) error {
	if cost < 0 {
		return fmt.Errorf("policy: %w: negative cost %d", sluice.ErrBadRequest, cost)
	}
	p := c.Policy.Load()
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.reqs, sc.levels = sc.reqs[:0], sc.levels[:0]
	var m Match
	p.walk(path, &m, func(n *node, key, tag string) {
		for j, l := range n.limits {
			sc.reqs = append(sc.reqs, sluice.Request{Key: limitKey(key, j, len(n.limits)), Tag: tag, Limit: l.limit, Cost: cost, Time: t, Shadow: n.shadow})
			sc.levels = append(sc.levels, sluice.Level{Pattern: n.pattern, Spec: l.spec, Shadow: n.shadow})
		}
	})
	d.Matched = !m.Unmatched
	d.Levels = d.Levels[:0]
	pass := true
	if len(sc.reqs) > 0 {
		sc.results = append(sc.results[:0], make([]algo.Result, len(sc.reqs))...)
		var err error
		if pass, err = c.Store.DecideAll(ctx, sc.reqs, sc.results); err != nil {
			clear(sc.reqs) // drop references to keys and limits
			return err
		}
		for i, lv := range sc.levels {
			lv.Key, lv.Result = sc.reqs[i].Key, sc.results[i]
			d.Levels = append(d.Levels, lv)
		}
		clear(sc.reqs)
	}
	d.Summary = sluice.Summarize(d.Levels)
	d.Allowed = pass
	if m.Unmatched && p.DenyUnmatched() {
		d.Allowed = false
		d.Summary = algo.Result{Allowed: false, RetryAfter: algo.Never}
	}
	return nil
}

// scratch holds a check's buffers between checks.
type scratch struct {
	reqs    []sluice.Request
	results []algo.Result
	levels  []sluice.Level
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}
