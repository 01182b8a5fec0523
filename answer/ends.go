package answer

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

// settleEnds decides a call with ends (bit i of c.Ends for path i: Envoy's
// is_negative_hits, sent when a stream ends, apply_on_stream_done), to
// give back what the same descriptors took when it began: their
// concurrency limits free the path's cost in slots taken for no permit
// (algo.Concurrency: a release without a permit id), the earliest hold
// first, and their rate limits get back what the stream's start took, if
// it took it (policy.Checker.SettleOldest: the oldest ticket an admitted
// start of the same path and cost opened, given back only where that
// start counted it; with no ticket, nothing).
//
// An end and another path with the same entries charged in the same call
// are a settle: the estimate taken when the stream began given back and
// its real cost charged, as one change of their difference on the rate
// limits (a reward of what the estimate took beyond the cost, or a
// penalty of the excess, past the limit if need be), so that the charge
// is neither lost nor admitted beyond the limit in between; with no
// ticket (the start was denied or never decided, or another end took its
// ticket) the cost is recorded in full: what was used is never lost. The
// other paths are decided as in any call (starts, with c.Starts for their
// tickets), all or nothing among them, and the changes happen whatever
// that decision is.
//
// Afterwards c.Returned is the release's decision, c.Settled (bit i) the
// paths that were the real cost of an end, c.Decision the decision of
// the other paths (allowed when there are none), and each of c.Query's
// paths is the one decided for it.
func (p *Pipeline) settleEnds(ctx context.Context, c *Call, pc *policy.Checker) error {
	q, ends := &c.Query, c.Ends
	// rel: every end (its slots released); pos: the charges decided
	// (posStarts: those with tickets to open); settles: the ends to
	// settle; over: the excesses of ends with no ticket.
	rel, pos, over := &policy.Query{}, &policy.Query{}, &policy.Query{}
	var posStarts uint64
	type settle struct {
		path           []string
		estimate, cost int64
	}
	var settles []settle
	for i := range q.Paths {
		if ends&(1<<i) != 0 {
			rel.Paths = append(rel.Paths, q.Paths[i])
		}
	}
	paired := make([]bool, len(rel.Paths))
	samePath := func(path []string) func(policy.PathQuery) bool {
		return func(r policy.PathQuery) bool { return slices.Equal(r.Path, path) }
	}
	for i := range q.Paths {
		if ends&(1<<i) != 0 {
			continue
		}
		pq := q.Paths[i]
		k := slices.IndexFunc(rel.Paths, samePath(pq.Path))
		for k >= 0 && paired[k] {
			next := slices.IndexFunc(rel.Paths[k+1:], samePath(pq.Path))
			if next < 0 {
				k = -1
			} else {
				k += 1 + next
			}
		}
		if k < 0 || pq.Path == nil {
			if c.Starts&(1<<i) != 0 {
				posStarts |= 1 << len(pos.Paths)
			}
			pos.Paths = append(pos.Paths, pq)
			continue
		}
		paired[k], c.Settled = true, c.Settled|1<<i
		settles = append(settles, settle{pq.Path, rel.Paths[k].Cost, pq.Cost})
	}
	for k := range rel.Paths {
		if !paired[k] && rel.Paths[k].Path != nil {
			settles = append(settles, settle{rel.Paths[k].Path, rel.Paths[k].Cost, 0})
		}
	}
	// Slots are released first, so that a stream starting in the same
	// call may take one.
	err := pc.Release(ctx, rel, 0, &c.Returned)
	c.Decision.Allowed, c.Decision.Matched = true, true
	if err == nil && len(pos.Paths) > 0 {
		err = pc.DecideStarts(ctx, pos, &c.Decision, posStarts)
	}
	for _, s := range settles {
		if err != nil {
			break
		}
		var ok bool
		if ok, err = pc.SettleOldest(ctx, time.Time{}, s.path, s.estimate, s.cost); err == nil && !ok && s.cost > 0 {
			over.Paths = append(over.Paths, policy.PathQuery{Path: s.path, Exact: true, Cost: s.cost})
		}
	}
	if err == nil {
		err = pc.Adjust(ctx, over, algo.Penalize)
	}
	r, n := 0, 0
	for i := range q.Paths {
		switch {
		case ends&(1<<i) != 0:
			q.Paths[i] = rel.Paths[r]
			r++
		case c.Settled&(1<<i) == 0:
			q.Paths[i] = pos.Paths[n]
			n++
		}
	}
	return err
}
