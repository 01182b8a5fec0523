package policy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Checker decides request paths against the policy a Holder holds, on a
// store: every limit the paths hit in one all-or-nothing DecideAll (one
// script call per Redis slot involved). It is the one way Sluice decides a
// path: the service's HTTP and gRPC APIs, its admin peek, sluice replay
// and the httplimit middleware all go through it.
type Checker struct {
	Policy *Holder
	Store  store.Store
}

// Query is what Checker.Decide decides: one or more paths at one time,
// all or nothing.
type Query struct {
	// Time is the time of the decision; the zero Time is the store's
	// clock.
	Time time.Time
	// Paths are the paths to decide together.
	Paths []PathQuery
	// Permit and Op are what the paths' concurrency limits decide: Op for
	// the permit id Permit (algo.Plan.ForPermit; 0: none). An Acquire
	// decides every limit; a Renew or a Release only the concurrency
	// limits, and reports only their levels.
	Permit int64
	Op     algo.SlotOp
	// NewPermit, with Op Acquire and Permit 0, takes a new permit id
	// (sluice.NewPermitID) when a path hits a concurrency limit, so that
	// the Decision's Permit names the slots it holds; without it such
	// slots are taken for no permit, and freed by a release without one
	// or when their lease ends (Envoy's protocol).
	NewPermit bool
}

// PathQuery is one path of a Query, and, after Decide, what it hit.
type PathQuery struct {
	// Path is the request path, such as ["user", "alex", "trade"].
	Path []string
	// Cost is what the path consumes at each limit it hits; 0 peeks.
	Cost int64
	// Exact limits the path by the limits of the one node its whole path
	// reaches, as Envoy's rate limit service matches a descriptor, rather
	// than by every node with limits on its walk. A path whose walk stops
	// early, or reaches an unlimited node, hits nothing.
	Exact bool

	// Match is the walk's outcome, set by Decide. Its Hits are the nodes
	// the path is limited by. With Exact they are at most the last one,
	// and Unmatched reports that the whole path reached neither a node
	// with limits nor an unlimited node.
	Match Match
	// Levels are the path's levels in the Decision, set by Decide: one per
	// limit of each hit, from the root down. Paths of one Query that hit
	// the same limit key share its state and its result, and the costs of
	// all of them are added.
	Levels []Level
}

// Check decides a request for path of the given cost at the store's
// clock; see CheckAt.
func (c *Checker) Check(ctx context.Context, path []string, cost int64, d *Decision) error {
	return c.CheckAt(ctx, time.Time{}, path, cost, d)
}

// CheckAt decides a request for path of the given cost at time t (the zero
// Time for the store's clock) against every node with limits on its walk,
// and fills d, reusing the capacity of d.Levels. A request that matches no
// level is allowed, or denied with RetryAfter Never when the policy says
// unmatched: deny; its shadow levels are still checked and reported.
func (c *Checker) CheckAt(ctx context.Context, t time.Time, path []string, cost int64, d *Decision) error {
	return c.decidePath(ctx, t, path, cost, 0, algo.Acquire, false, d)
}

// decidePath decides one path as a Query of it with the given time and
// the Query's Permit, Op and NewPermit.
func (c *Checker) decidePath(ctx context.Context, t time.Time, path []string, cost, permit int64, op algo.SlotOp, newPermit bool, d *Decision) error {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	q := &sc.q
	q.Time, q.Permit, q.Op, q.NewPermit = t, permit, op, newPermit
	if len(q.Paths) == 0 {
		q.Paths = make([]PathQuery, 1)
	}
	pq := &q.Paths[0]
	*pq = PathQuery{Path: path, Cost: cost, Match: Match{Hits: pq.Match.Hits}}
	return c.decide(ctx, q, d, sc)
}

// Hold is Check for a caller that holds the slots it takes until it
// releases them: a path that hits concurrency limits takes its slots
// under a new permit id (Decision.Permit), which Slots renews and releases.
// A path without one costs what Check does.
func (c *Checker) Hold(ctx context.Context, path []string, cost int64, d *Decision) error {
	return c.decidePath(ctx, time.Time{}, path, cost, 0, algo.Acquire, true, d)
}

// Slots decides op for permit on the concurrency limits of path at time t
// (the zero Time for the store's clock), and fills d; see
// algo.Concurrency. An Acquire is CheckAt with the permit: every level is
// decided, all or nothing, so a request a rate level denies takes no slot.
// A Renew and a Release decide the concurrency levels alone (cost is what
// a Release without a permit frees); a Renew is denied, with RetryAfter
// algo.Never, when a level no longer holds the permit, and renews no
// level then.
func (c *Checker) Slots(ctx context.Context, t time.Time, path []string, cost, permit int64, op algo.SlotOp, d *Decision) error {
	return c.decidePath(ctx, t, path, cost, permit, op, false, d)
}

// Undo gives back what an allowed check of path at cost took, as a
// caller does that gives up waiting out a Decision.Delay: on every level
// whose limit can give units back (gcra and token_bucket) through a store
// that refunds (the memory and Redis stores: store.Refunder). A window
// keeps its count, erring towards denying. It walks the policy in force,
// so after a reload it gives back by the new one.
func (c *Checker) Undo(ctx context.Context, path []string, cost int64) error {
	r, ok := c.Store.(store.Refunder)
	if !ok {
		return fmt.Errorf("policy: %w: the store cannot give units back", algo.ErrUnsupported)
	}
	m := c.Policy.Load().Match(path)
	var first error
	for i := range m.Hits {
		h := &m.Hits[i]
		for j := range h.Limits {
			req := h.Request(j, cost)
			if _, err := req.Plan.TAT(); err != nil {
				continue // a window: it cannot give back
			}
			if err := r.Refund(ctx, req); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Decide decides every path of q together, all or nothing, and fills d
// (reusing the capacity of d.Levels) and each path's Match and Levels. d
// is allowed when every enforced level allowed and no path is unmatched
// under unmatched: deny; its Summary folds every level (Summarize),
// or is a denial with RetryAfter Never when a path is unmatched under
// unmatched: deny. Matched is false when some path matched no policy.
// A cost outside 0..algo.MaxCount is an error wrapping
// store.ErrBadRequest; a store
// failure is returned as the store gave it, and the paths' Match is set.
func (c *Checker) Decide(ctx context.Context, q *Query, d *Decision) error {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	return c.decide(ctx, q, d, sc)
}

func (c *Checker) decide(ctx context.Context, q *Query, d *Decision, sc *scratch) error {
	for i := range q.Paths {
		if cost := q.Paths[i].Cost; cost < 0 || cost > algo.MaxCount {
			return fmt.Errorf("policy: %w: cost %d is outside 0..%d", store.ErrBadRequest, cost, algo.MaxCount)
		}
	}
	p := c.Policy.Load()
	replacing := false
	for i := range q.Paths {
		pq := &q.Paths[i]
		pq.Match = Match{Hits: pq.Match.Hits[:0]}
		p.walk(pq.Path, &pq.Match, func(n *node, seg int, key, tag string, shared bool) {
			if !pq.Exact || seg == len(pq.Path)-1 {
				pq.Match.Hits = append(pq.Match.Hits, n.hit(key, tag, shared, pq.Exact))
			}
		})
		pq.Match.applyList()
		if pq.Exact {
			m := &pq.Match
			if m.Depth != len(pq.Path) {
				m.Hits, m.Unlimited = m.Hits[:0], false // the walk stopped early
			} else if m.Unlimited {
				m.Hits = m.Hits[:0]
			}
			m.Unmatched = len(m.Hits) == 0 && !m.Unlimited && m.Listed.List == ""
		}
		for h := range pq.Match.Hits {
			replacing = replacing || len(pq.Match.Hits[h].Replaces) > 0
		}
	}
	if replacing && len(q.Paths) > 1 {
		dropReplaced(q)
	}
	// A deny list denies the whole decision, which then counts nothing;
	// an allow list is named unless a deny list decides.
	var listed Listed
	for i := range q.Paths {
		if l := q.Paths[i].Match.Listed; l.List == "deny" || listed.List == "" {
			listed = l
			if l.List == "deny" {
				break
			}
		}
	}
	if listed.List == "deny" {
		refuseAll(q, d, listed.String(), 0)
		return nil
	}
	for i := range q.Paths {
		if err := sc.add(&q.Paths[i], q, len(q.Paths) > 1); err != nil {
			return err
		}
	}
	// A delay node decides with a reserving plan, which must never see a
	// cost above its limit's burst (algo.Plan.Reserving): such a cost is
	// never admitted, and nothing is decided.
	for i, k := 0, 0; i < len(q.Paths); i++ {
		for _, hit := range q.Paths[i].Match.Hits {
			for range hit.Limits {
				r := sc.index[k]
				k++
				if hit.Delay == 0 || r < 0 {
					continue
				}
				if t, err := sc.reqs[r].Plan.TAT(); err == nil && sc.reqs[r].Cost > t.Quota {
					refuseAll(q, d, "", t.Quota)
					return nil
				}
			}
		}
	}

	pass := true
	if len(sc.reqs) > 0 {
		sc.results = append(sc.results[:0], make([]algo.Result, len(sc.reqs))...)
		var err error
		if pass, err = c.Store.DecideAll(ctx, sc.reqs, sc.results); err != nil {
			return err
		}
	}
	d.Levels = d.Levels[:0]
	d.Matched = true
	d.Listed = listed.String()
	deny := false
	var delay time.Duration
	k := 0
	for i := range q.Paths {
		pq := &q.Paths[i]
		start := len(d.Levels)
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			for _, l := range hit.Limits {
				r := sc.index[k]
				k++
				if r < 0 {
					continue // not decided: a Renew or Release of a rate limit
				}
				res := sc.results[r]
				if hit.Delay > 0 {
					// The reserving plan's answer, by the limit as written.
					var wait time.Duration
					res, wait = algo.Unreserved(sc.reqs[r].Plan, res, hit.Delay, sc.reqs[r].Cost)
					if !hit.Shadow {
						delay = max(delay, wait)
					}
				}
				d.Levels = append(d.Levels, Level{Pattern: hit.Pattern, Key: sc.reqs[r].Key, Limit: l, Shadow: hit.Shadow, Result: res})
			}
		}
		pq.Levels = d.Levels[start:len(d.Levels):len(d.Levels)]
		if pq.Match.Unmatched {
			d.Matched = false
			deny = deny || p.DenyUnmatched()
		}
	}
	d.Summary = Summarize(d.Levels)
	d.Allowed = pass && !deny
	d.Delay, d.Permit = 0, 0
	if d.Allowed && q.Op == algo.Acquire && q.Permit != 0 && slices.ContainsFunc(d.Levels, holdsSlots) {
		d.Permit = q.Permit
	}
	if d.Allowed {
		d.Delay = delay
	}
	if deny {
		d.Summary = algo.Result{Allowed: false, RetryAfter: algo.Never}
	}
	return nil
}

// holdsSlots reports whether a level took slots of a concurrency limit.
func holdsSlots(l Level) bool {
	return l.Limit != nil && l.Limit.Kind() == algo.KindConcurrency && l.Result.Admitted > 0
}

// refuseAll denies the whole of q for good without deciding a level: by
// the deny list entry listed, or a cost above a delay node's burst quota.
func refuseAll(q *Query, d *Decision, listed string, quota int64) {
	for i := range q.Paths {
		pq := &q.Paths[i]
		clear(pq.Match.Hits)
		pq.Match.Hits, pq.Levels = pq.Match.Hits[:0], nil
	}
	d.Levels, d.Matched, d.Allowed, d.Listed, d.Delay, d.Permit = d.Levels[:0], true, false, listed, 0, 0
	d.Summary = algo.Result{Allowed: false, Quota: quota, RetryAfter: algo.Never}
}

// dropReplaced drops the hits on nodes whose name a hit of another path
// replaces (envoyproxy/ratelimit's replaces): they are not decided, and
// their path is not unmatched for it.
func dropReplaced(q *Query) {
	var replaced []string
	for i := range q.Paths {
		for _, h := range q.Paths[i].Match.Hits {
			replaced = append(replaced, h.Replaces...)
		}
	}
	for i := range q.Paths {
		m := &q.Paths[i].Match
		kept := m.Hits[:0]
		for _, h := range m.Hits {
			if h.Name == "" || !slices.Contains(replaced, h.Name) {
				kept = append(kept, h)
			}
		}
		if len(kept) < len(m.Hits) {
			clear(m.Hits[len(kept):])
			m.Hits = kept
			m.Unmatched = false
		}
	}
}

// scratch holds a decision's buffers between decisions.
type scratch struct {
	q       Query // CheckAt's one-path query
	reqs    []store.Request
	results []algo.Result
	// index[k] is the request of the k-th limit over every path's hits.
	index []int
	// byKey finds the request of a limit key, when several paths may
	// share one.
	byKey map[string]int
}

// add appends the requests of a path's hits, each concurrency limit's
// for q's permit and op; with merge, a limit key already requested adds
// its cost to that request. A limit that q's op does not decide (a rate
// limit when renewing or releasing) gets the index -1.
func (sc *scratch) add(pq *PathQuery, q *Query, merge bool) error {
	for h := range pq.Match.Hits {
		hit := &pq.Match.Hits[h]
		for j := range hit.Limits {
			r := hit.Request(j, pq.Cost)
			r.Time = q.Time
			if p := r.Plan; p.Kind() == algo.KindConcurrency {
				if q.NewPermit && q.Permit == 0 && q.Op == algo.Acquire {
					q.Permit = sluice.NewPermitID()
				}
				if q.Permit != 0 || q.Op != algo.Acquire {
					fp, err := p.ForPermit(q.Permit, q.Op)
					if err != nil {
						return fmt.Errorf("policy: %w: %w", store.ErrBadRequest, err)
					}
					r.Plan = &fp
				}
			} else if q.Op != algo.Acquire {
				sc.index = append(sc.index, -1)
				continue
			}
			if !merge {
				sc.index = append(sc.index, len(sc.reqs))
				sc.reqs = append(sc.reqs, r)
				continue
			}
			if sc.byKey == nil {
				sc.byKey = map[string]int{}
			}
			var i int
			sc.reqs, i = mergeRequest(sc.reqs, sc.byKey, r)
			sc.index = append(sc.index, i)
		}
	}
	return nil
}

// mergeRequest appends r to reqs, or adds its cost to the request of its
// key that byKey finds there, and returns reqs and r's index in it.
func mergeRequest(reqs []store.Request, byKey map[string]int, r store.Request) ([]store.Request, int) {
	if i, ok := byKey[r.Key]; ok {
		reqs[i].Cost += r.Cost
		return reqs, i
	}
	byKey[r.Key] = len(reqs)
	return append(reqs, r), len(reqs)
}

// release drops the references the scratch holds and pools it.
func (sc *scratch) release() {
	clear(sc.reqs)
	sc.reqs, sc.results, sc.index = sc.reqs[:0], sc.results[:0], sc.index[:0]
	clear(sc.byKey)
	if len(sc.q.Paths) > 0 {
		pq := &sc.q.Paths[0]
		clear(pq.Match.Hits)
		*pq = PathQuery{Match: Match{Hits: pq.Match.Hits[:0]}}
	}
	sc.q.Permit, sc.q.Op, sc.q.NewPermit = 0, algo.Acquire, false
	scratchPool.Put(sc)
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// LeaseRequests returns the requests a client that admits q's paths on
// its own (an Envoy proxy given RLS quota) must have counted ahead, as
// Decide just decided q: each path at its cost on every limit it hit,
// costs on one key added, every request with Lease set. ok is false, and
// nothing may be granted, unless every hit of q enforces limits on a node
// with lease: true: a shadow hit, or a path that matched nothing, would
// not be reported by the client. A store that grants (store.Granter)
// takes them.
func LeaseRequests(q *Query) (reqs []store.Request, ok bool) {
	byKey := map[string]int{}
	for i := range q.Paths {
		pq := &q.Paths[i]
		if len(pq.Match.Hits) == 0 {
			return nil, false
		}
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			if !hit.Lease || hit.Shadow {
				return nil, false
			}
			for j := range hit.Limits {
				reqs, _ = mergeRequest(reqs, byKey, hit.Request(j, pq.Cost))
			}
		}
	}
	return reqs, true
}
