package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// A Change is a change to a path's keys outside a request: a penalty or a
// reward of Units (Op), or a block for Block, or an unblock (Unblock).
// One is set: Op, Block or Unblock.
type Change struct {
	Op      algo.Adjust
	Units   int64
	Block   time.Duration
	Unblock bool
	// Shared, when set, changes the levels every caller shares too (such
	// as login above login/*): a penalty there would hold back everyone.
	Shared bool
}

// ErrNothingToChange is wrapped by Change's error when no level of the
// path can take the change: none has a limit that counts both ways (a
// penalty, a reward) or a block (a block, an unblock).
var ErrNothingToChange = errors.New("no level of the path can take the change")

// Change applies c at time t (the zero Time: the store's clock) to the
// keys of the path's own levels (its caller's; with c.Shared, every level)
// whose limit can take it: a penalty or a reward where the limit counts
// both ways (any but a gate and concurrency slots), a block or an unblock
// where it has a block. It returns the keys changed, in walk order; an
// error wrapping ErrNothingToChange (and store.ErrBadRequest) when there
// were none.
func (c *Checker) Change(ctx context.Context, t time.Time, path []string, ch Change) ([]string, error) {
	a, ok := c.Store.(store.Adjuster)
	if !ok {
		return nil, fmt.Errorf("policy: %w: the store cannot change keys outside a request", algo.ErrUnsupported)
	}
	m := c.Policy.Load().Match(path)
	var keys []string
	for i := range m.Hits {
		h := &m.Hits[i]
		if h.Shared && !ch.Shared {
			continue
		}
		for j := range h.Limits {
			req := h.Request(j, ch.Units)
			req.Time = t
			p := req.Plan
			var err error
			switch {
			case ch.Unblock || ch.Block > 0:
				if _, blocks := p.Blocks(); !blocks {
					continue
				}
				if ch.Unblock {
					err = a.Unblock(ctx, req)
				} else {
					err = a.Block(ctx, req, ch.Block)
				}
			default:
				if err := p.ValidateAdjust(ch.Op, ch.Units); errors.Is(err, algo.ErrNotAdjustable) {
					continue // a kind without a count to move
				} else if err != nil {
					return keys, fmt.Errorf("policy: %w: %w", store.ErrBadRequest, err)
				}
				err = a.Adjust(ctx, req, ch.Op)
			}
			if err != nil {
				return keys, err
			}
			keys = append(keys, req.Key)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("policy: %w: %w: %s", store.ErrBadRequest, ErrNothingToChange, ch.need())
	}
	return keys, nil
}

func (ch Change) need() string {
	switch {
	case ch.Unblock:
		return "an unblock needs a level with a block"
	case ch.Block > 0:
		return "a block needs a level with a block (block: {for: ...})"
	}
	return fmt.Sprintf("a %v needs a level that counts both ways: not a gate or concurrency slots", ch.Op)
}

// adjust applies op of each path's cost to every level of q's paths whose
// limit counts both ways (any but a gate and concurrency slots): a reward
// gives back what the path took (an allowed check given up, Envoy's
// is_negative_hits), never beyond an empty state; a penalty records the
// cost past the limit if need be (the excess of a real cost over its
// estimate). A gate keeps what it recorded, and concurrency slots are
// released, not given back (Release).
// The levels change one by one, not all or nothing. It walks the policy
// in force, so after a reload it changes by the new one.
func (c *Checker) adjust(ctx context.Context, q *Query, op algo.Adjust) error {
	a, adjusts := c.Store.(store.Adjuster)
	p := c.Policy.Load()
	for i := range q.Paths {
		pq := &q.Paths[i]
		if err := c.match(p, pq, q.Time); err != nil {
			return err
		}
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			for j := range hit.Limits {
				req := hit.Request(j, pq.Cost)
				req.Time = q.Time
				if isConcurrency(req) || req.Plan.ValidateAdjust(op, req.Cost) != nil {
					continue // released, not adjusted; or nothing to change (a cost of 0)
				}
				if !adjusts {
					return fmt.Errorf("policy: %w: the store cannot change keys outside a request", algo.ErrUnsupported)
				}
				if err := a.Adjust(ctx, req, op); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
