package policy

import (
	"context"
	"fmt"
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
	m := p.Match(path)
	d.Matched = !m.Unmatched
	d.Levels = d.Levels[:0]
	pass := true
	if reqs := m.Requests(cost, t); len(reqs) > 0 {
		results := make([]algo.Result, len(reqs))
		var err error
		if pass, err = c.Store.DecideAll(ctx, reqs, results); err != nil {
			return err
		}
		i := 0
		for _, lv := range m.Levels {
			for _, l := range lv.Limits {
				d.Levels = append(d.Levels, sluice.Level{Pattern: lv.Pattern, Key: l.Key, Spec: l.Spec, Shadow: lv.Shadow, Result: results[i]})
				i++
			}
		}
	}
	d.Summary = sluice.Summarize(d.Levels)
	d.Allowed = pass
	if m.Unmatched && p.DenyUnmatched() {
		d.Allowed = false
		d.Summary = algo.Result{Allowed: false, RetryAfter: algo.Never}
	}
	return nil
}
