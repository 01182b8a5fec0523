package policy_test

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// requests is one request per limit of the match's hits, from the root
// down, as policy.Checker builds them.
func requests(m policy.Match, cost int64, t time.Time) []store.Request {
	var reqs []store.Request
	for _, h := range m.Hits {
		for j, l := range h.Limits {
			reqs = append(reqs, store.Request{Key: h.LimitKey(j), Tag: h.Tag, Plan: algo.MustCompile(l), Cost: cost, Time: t, Shadow: h.Shadow})
		}
	}
	return reqs
}

// check is a Check of one path at cost at time t (the zero Time: the
// store's clock).
func check(c *policy.Checker, ctx context.Context, t time.Time, path []string, cost int64, d *policy.Decision) error {
	return c.Decide(ctx, &policy.Query{Time: t, Paths: []policy.PathQuery{{Path: path, Cost: cost}}}, d)
}

// estimateWithin is an Estimate of q, settled within; it returns the settle id.
func estimateWithin(c *policy.Checker, ctx context.Context, q *policy.Query, d *policy.Decision, within time.Duration) (string, error) {
	q.Op, q.Within = policy.Estimate, within
	err := c.Decide(ctx, q, d)
	return d.Ticket, err
}

// settleAt is a Settle of id at time t at costs, one per path.
func settleAt(c *policy.Checker, ctx context.Context, t time.Time, id string, costs ...int64) (bool, error) {
	q := &policy.Query{Op: policy.Settle, Time: t, Ticket: id, Paths: make([]policy.PathQuery, len(costs))}
	for i, cost := range costs {
		q.Paths[i].Cost = cost
	}
	var d policy.Decision
	err := c.Decide(ctx, q, &d)
	return d.Settled, err
}

// slots does op (Acquire, Renew, Release) of permit with q's paths.
func slots(c *policy.Checker, ctx context.Context, op policy.Op, q *policy.Query, permit int64, d *policy.Decision) error {
	q.Op, q.Permit = op, permit
	return c.Decide(ctx, q, d)
}
