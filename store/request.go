package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// What a store does with a Request before it decides: check the
// key, cost, time and tag, and compile the limit into an algo.Plan. A
// store calls Compile (one request) or CompileAll (a DecideAll), or, for
// an entry point that takes the parts one by one (memory.Store.AllowN),
// CheckDecision, CheckTag and CheckCost. Every error wraps
// ErrBadRequest, or algo.ErrInvalid for the limit.

// Compile checks the request's key, cost, time and tag, and compiles its
// limit into p (algo.Plan.Compile): what a store decides with. The
// request does not escape: a limit value in it stays on the caller's
// stack.
func Compile(r *Request, p *algo.Plan) error {
	return checked(r, func() (*algo.Plan, error) { return p, p.Compile(r.Limit) })
}

// checked checks r's key, cost, time and tag, then gets its plan from
// plan (nil: none, and nothing more is checked) and checks r's cost
// against it: the one order of the checks, for Compile, Cached and
// CompileAll.
func checked(r *Request, plan func() (*algo.Plan, error)) error {
	if err := CheckDecision(r.Key, r.Limit, r.Cost, r.Time); err != nil {
		return err
	}
	if err := CheckTag(r.Key, r.Tag); err != nil {
		return err
	}
	p, err := plan()
	if err != nil || p == nil {
		return err
	}
	return CheckCost(p, r.Cost)
}

// CompileHolders checks r as Compile does for a HolderLister, whose limit
// must be a concurrency limit (else an error wrapping
// algo.ErrUnsupported), and returns that limit.
func CompileHolders(r *Request, p *algo.Plan) (algo.Concurrency, error) {
	if err := Compile(r, p); err != nil {
		return algo.Concurrency{}, err
	}
	c, ok := p.Concurrency()
	if !ok {
		return c, fmt.Errorf("store: holders: %w: %v has no holders (only a concurrency limit does)", algo.ErrUnsupported, p.Kind())
	}
	return c, nil
}

// Cached checks r as Compile does when its limit has a plan already, the
// limit itself (an *algo.Plan: a policy's, a Limiter's) or c's copy of a
// limit value seen before, and returns that plan, shared: read it, never
// change it. It returns nil and no error when there is none, and the
// caller compiles.
func Cached(c *algo.Plans, r *Request) (*algo.Plan, error) {
	p := c.Lookup(r.Limit)
	if p == nil {
		return nil, nil
	}
	return p, checked(r, func() (*algo.Plan, error) { return p, nil })
}

// CompileAll checks the requests of a DecideAll as Compile does, and that
// all share the first one's Time and that there is one result per
// request, and sets plans[i] to request i's Plan: the limit itself when it
// is a plan (a policy's), c's cached plan of a limit value seen before
// (when c is not nil), or one compiled into scratch[i] (a new Plan when
// scratch is nil, so that a batch of compiled limits allocates nothing).
// Those are shared: read them, never change them. With several requests
// each plan is the one to apply in a batch (algo.Plan.Batched, made in
// scratch when it differs). plans, and scratch unless nil, have one
// element per request.
func CompileAll(c *algo.Plans, reqs []Request, results []algo.Result, scratch []algo.Plan, plans []*algo.Plan) error {
	switch {
	case len(reqs) == 0:
		return fmt.Errorf("%w: no requests", ErrBadRequest)
	case len(results) != len(reqs):
		return fmt.Errorf("%w: %d results for %d requests", ErrBadRequest, len(results), len(reqs))
	case len(plans) != len(reqs) || scratch != nil && len(scratch) != len(reqs):
		return fmt.Errorf("store: CompileAll: %d plans and %d scratch plans for %d requests", len(plans), len(scratch), len(reqs))
	}
	spare := func(i int) *algo.Plan {
		if scratch == nil {
			return new(algo.Plan)
		}
		return &scratch[i]
	}
	for i := range reqs {
		r := &reqs[i]
		err := checked(r, func() (*algo.Plan, error) {
			var q *algo.Plan
			if c != nil {
				q = c.Lookup(r.Limit)
			}
			var err error
			if q == nil {
				q = spare(i)
				if c == nil {
					err = q.Compile(r.Limit)
				} else {
					q, err = c.Compile(r.Limit, q)
				}
			}
			if err == nil && len(reqs) > 1 && q.ChangesInBatch() {
				q = q.Batched(spare(i)) // a nary log: a binary copy
			}
			plans[i] = q
			return q, err
		})
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if !r.Time.Equal(reqs[0].Time) {
			return fmt.Errorf("%w: request %d has another time than request 0", ErrBadRequest, i)
		}
	}
	return nil
}

// CheckDecision checks the parts of a decision but its tag and its limit's
// parameters: a key of 1 to MaxKeyLen bytes, a cost of 0 to
// algo.MaxCount, a limit, and a time (when set) within 1970..2255. l does
// not escape.
func CheckDecision(key string, l algo.Limit, cost int64, t time.Time) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrBadRequest)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrBadRequest, len(key), MaxKeyLen)
	case cost < 0:
		return fmt.Errorf("%w: negative cost %d", ErrBadRequest, cost)
	case cost > algo.MaxCount:
		return fmt.Errorf("%w: cost %d exceeds %d (algo.MaxCount)", ErrBadRequest, cost, algo.MaxCount)
	case l == nil:
		return fmt.Errorf("%w: no limit", ErrBadRequest)
	}
	if !t.IsZero() {
		if us := t.UnixMicro(); us < 0 || us > algo.MaxTime {
			return fmt.Errorf("%w: time %s is outside 1970..2255", ErrBadRequest, t.UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// CheckTag checks a request's tag: it must be a prefix of the key.
func CheckTag(key, tag string) error {
	if !strings.HasPrefix(key, tag) {
		// Copies of the strings go into the error, so that a request's
		// key and tag do not escape for the sake of an error.
		return fmt.Errorf("%w: tag %q is not a prefix of key %q", ErrBadRequest, strings.Clone(tag), strings.Clone(key))
	}
	return nil
}

// CheckCost checks a cost against the most one decision of the plan's
// limit takes (algo.Plan.MaxCost).
func CheckCost(p *algo.Plan, cost int64) error {
	if cost > p.MaxCost() {
		return fmt.Errorf("%w: cost %d exceeds %d, the most one %s decision takes (an exact log writes an entry per action: set buckets)", ErrBadRequest, cost, p.MaxCost(), p.Kind())
	}
	return nil
}
