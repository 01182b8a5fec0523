package policy

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/permitid"
	"github.com/sluicehq/sluice/store"
)

// Checker decides request paths against the policy in force (Current), on a
// store: every limit the paths hit in one all-or-nothing DecideAll (one
// script call per Redis slot involved). It is the one way Sluice decides a
// path: the service's HTTP and gRPC APIs, its admin peek, sluice replay
// and the httplimit middleware all go through it.
type Checker struct {
	Policy *Current
	Store  store.Store

	overrides atomic.Pointer[overrideSet] // as of the last Refresh
}

// Query is what Checker.Decide decides: one or more paths at one time,
// all or nothing, and what to do with them (Op).
type Query struct {
	// Time is the time of the decision; the zero Time is the store's
	// clock.
	Time time.Time
	// Paths are the paths to decide together.
	Paths []PathQuery
	// Op is what the decision does; the zero Op is Check.
	Op Op
	// Permit is the permit whose slots Acquire takes (0: a new one),
	// Renew renews and Release gives back (0: slots taken for no permit).
	Permit int64
	// Within is how long an Estimate may wait for its Settle
	// (store.MinTicket to store.MaxTicket).
	Within time.Duration
	// Ticket is the estimate Settle settles: the Decision.Ticket of its
	// Estimate.
	Ticket string
}

// Op is what Checker.Decide does with a query's paths. Every Op but
// Settle and GiveBack fills the Decision with the levels it decided.
type Op uint8

const (
	// Check decides each path at its Cost (0 peeks) against every node
	// with limits on its walk. A request that matches no level is
	// allowed, or denied with RetryAfter Never when the policy says
	// unmatched: deny; its shadow levels are still checked and reported.
	// A concurrency limit on the walk takes slots for no permit. A path
	// marked Start or End is one end of a stream (Envoy's protocol: see
	// PathQuery.Start).
	Check Op = iota
	// Acquire is Check for a caller that holds the slots it takes until
	// it releases them: when a path hits concurrency limits, their slots
	// are taken under Query.Permit, or under a new permit id when it is 0
	// (Decision.Permit), which Renew renews and Release gives back; every
	// other level is decided as Check does, all or nothing, so a request
	// a rate level denies takes no slot.
	Acquire
	// Renew renews the hold of Query.Permit's slots on the concurrency
	// limits of the paths (store.DecideSlots), and fills the Decision with those
	// levels alone; it is denied, with RetryAfter algo.Never, when a level
	// no longer holds the permit, and renews no level then.
	Renew
	// Release gives back Query.Permit's slots on the concurrency limits
	// of the paths (store.DecideSlots; permit 0: each path's Cost of the
	// slots taken for no permit), and fills the Decision with those
	// levels alone.
	Release
	// Estimate is Check of each path's Cost as an estimate of a cost
	// known only later (the tokens of a response, written as max_tokens,
	// beside 1 for the request itself); admitted on every path, it sets
	// Decision.Ticket, the id to Settle it with within Query.Within. A
	// denied estimate records nothing, even on a level with debt: the
	// request does not go on. An estimate not settled in time stays
	// counted in full, as if its holder had crashed: nothing is ever
	// given back that was not settled. The id says each path's estimate
	// and when it was counted (Query.Time, or the store's clock when
	// zero): a settle gives back only there. Its one ticket is kept with
	// the last path's own level (the last hit of the last path that hits
	// one: for paths such as a caller's calls and its token budget, the
	// budget's, which a settle changes), whose key holds at most
	// store.MaxOpenTickets open: one more is refused, before anything is
	// decided, with store.ErrTooManyTickets. The error wraps
	// store.ErrBadRequest for no path, a bad Within or cost, or paths
	// whose id would be longer than MaxEstimateID, and
	// algo.ErrUnsupported for a store without tickets (store.Settler).
	Estimate
	// Settle settles Query.Ticket at the real costs of its paths: the
	// Query's Paths, one per path of the estimate in its order, each with
	// its Cost (their Path is read from the id). On every key its paths
	// hit whose limit counts both ways (any but a gate and concurrency
	// slots), the noDebt less the real costs of the paths on it are
	// given back, but only what of it still counts in the window the
	// estimate was counted in (algo.Plan.GiveBack: nothing once that
	// window has ended, never to a later one), or, when the real costs
	// are above, the excess is recorded (a penalty, past the limit if
	// need be, now), in one atomic step with taking its ticket. A settle
	// that both charges one key and gives back on another charges with
	// taking the ticket, then gives back in a second step (if that
	// fails, the estimate stays counted there: never more is given
	// back). Decision.Settled is false, nothing changed, for an id
	// settled already, not settled within its time or never issued (a
	// forged one), and true, nothing changed, for paths the policy in
	// force does not limit. The error wraps store.ErrBadRequest for a
	// malformed id, costs not one per path, or a cost outside
	// 0..MaxCount.
	Settle
	// GiveBack gives back what an allowed Check of the paths at their
	// costs took (a delay's wait abandoned): a reward of each path's Cost
	// on every level of its walk that counts both ways, level by level,
	// not all or nothing; concurrency slots are released by Release.
	GiveBack
)

// slot is what a decision's concurrency limits do (store.DecideSlots of
// Acquire, Renew or Release): op for permit (0: none); with fresh, an Acquire takes a new
// permit id when a path hits a concurrency limit.
type slot struct {
	op     algo.SlotOp
	permit int64
	fresh  bool
	// estimate: the cost is an estimate (Estimate), which a level with
	// debt does not record when it denies it: the request does not go on.
	estimate bool
}

// estimating is how an Estimate decides: as a Check, its cost an estimate.
var estimating = slot{op: algo.Acquire, estimate: true}

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
	// Limit, when set, is a per-request limit (Envoy's
	// RateLimitDescriptor.limit): the deepest node the path hits decides
	// by it instead of its own limits, on a key of its window, when the
	// node says request_limit and the limit is within its bound (at most
	// max per window, as a rate); one above the bound is an error
	// wrapping store.ErrBadRequest. On a node without request_limit it
	// is ignored, and Decide sets LimitIgnored.
	Limit *algo.FixedWindow
	// Override makes Limit envoyproxy/ratelimit's descriptor limit (the
	// service's Envoy drop-in): on an Exact path it takes the place of
	// whatever the path's node says (limits, shadow, quota_mode, name,
	// unlimited), or applies where no node matches below its first
	// segment (Envoy's domain); no request_limit bounds it. It counts on
	// the path's own key, the key of the node's limit when that is a fixed
	// window of the same window (one counter for both, as Envoy keys a
	// count by descriptor and window).
	Override bool
	// QuotaMode puts every hit of the path that is not shadow in quota
	// mode (shadow, and Hit.QuotaMode), Override's too: envoyproxy/ratelimit's
	// QUOTA_MODE=true, for an Exact path.
	QuotaMode bool
	// LimitIgnored reports that Limit was set and ignored: the node the
	// path hit takes no per-request limit.
	LimitIgnored bool
	// Start and End pair a stream's two ends in a Check, as Envoy's
	// protocol does (it carries no id from one to the other): a Start
	// (a descriptor with a hits_addend of its own) is decided as any
	// path, and, admitted, opens a ticket of the estimate it took, which
	// the End of the same exact path and cost (is_negative_hits) takes;
	// see pair.go.
	Start, End bool
	// Settled reports, after Decide, that the path was the real cost of
	// an End in the same query, settled with it: it decided no level.
	Settled bool

	// Match is the walk's outcome, set by Decide. Its Hits are the nodes
	// the path is limited by. With Exact they are at most the last one,
	// and Unmatched reports that the whole path reached neither a node
	// with limits nor an unlimited node.
	Match Match
	// Levels are the path's levels in the Decision, set by Decide: one per
	// limit of each hit, from the root down. Paths of one Query that hit
	// the same limit key share its state and its result, and the costs of
	// all of them are added. An End's are the levels whose slots it
	// released.
	Levels []Level
}

// Decide does q.Op with every path of q together, all or nothing, and
// fills d (reusing the capacity of d.Levels) and each path's Match and
// Levels. d is allowed when every enforced level allowed and no path is
// unmatched under unmatched: deny; its Summary folds every level
// (Summarize), or is a denial with RetryAfter Never when a path is
// unmatched under unmatched: deny. Matched is false when some path
// matched no policy. A cost outside 0..algo.MaxCount is an error wrapping
// store.ErrBadRequest; a store failure is returned as the store gave it,
// and the paths' Match is set. It is the one way Sluice decides a path.
func (c *Checker) Decide(ctx context.Context, q *Query, d *Decision) error {
	for i := range q.Paths {
		if cost := q.Paths[i].Cost; cost < 0 || cost > algo.MaxCount {
			return fmt.Errorf("policy: %w: cost %d is outside 0..%d", store.ErrBadRequest, cost, algo.MaxCount)
		}
	}
	d.Ticket, d.Settled = "", false
	switch q.Op {
	case Estimate:
		return c.estimate(ctx, q, d)
	case Settle:
		return c.settle(ctx, q, d)
	case GiveBack:
		return c.adjust(ctx, q, algo.Reward)
	case Check:
		if ends, starts := streams(q); ends {
			return c.decideEnds(ctx, q, d)
		} else if starts {
			return c.decideStarts(ctx, q, d)
		}
	}
	return c.decideOp(ctx, q, d)
}

// decideOp is Decide of a Check, Acquire, Renew or Release, its paths no
// stream's ends.
func (c *Checker) decideOp(ctx context.Context, q *Query, d *Decision) error {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	s := slot{op: algo.Acquire}
	switch q.Op {
	case Acquire:
		s.permit, s.fresh = q.Permit, q.Permit == 0
	case Renew:
		s.op, s.permit = algo.Renew, q.Permit
	case Release:
		s.op, s.permit = algo.Release, q.Permit
	}
	p, err := c.matchQuery(q)
	if err != nil {
		return err
	}
	return c.decide(ctx, p, q, d, sc, s)
}

// matchQuery matches every path of q: its walk, with a per-request limit
// applied to its deepest hit; with several paths, the hits other hits
// replace are dropped. It returns the policy it matched them in.
func (c *Checker) matchQuery(q *Query) (*Policy, error) {
	p := c.Policy.Load()
	replacing := false
	for i := range q.Paths {
		pq := &q.Paths[i]
		if err := c.match(p, pq, q.Time); err != nil {
			return nil, err
		}
		pq.LimitIgnored = false
		switch {
		case pq.Limit != nil && pq.Override && pq.Exact && pq.Match.Listed.List == "" && pq.Match.Depth > 0:
			if err := overrideLimit(pq, p.counts); err != nil {
				return nil, err
			}
		case pq.Limit != nil && len(pq.Match.Hits) > 0:
			if err := applyRequestLimit(pq); err != nil {
				return nil, err
			}
		}
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			replacing = replacing || len(hit.Replaces) > 0
			if pq.QuotaMode && !hit.Shadow {
				hit.Shadow, hit.QuotaMode = true, true
			}
		}
	}
	if replacing && len(q.Paths) > 1 {
		dropReplaced(q)
	}
	return p, nil
}

// match sets pq.Match to what pq's path hits in p (Policy.match), with
// the overrides in force at t applied.
func (c *Checker) match(p *Policy, pq *PathQuery, t time.Time) error {
	if err := p.match(pq); err != nil {
		return err
	}
	if o := c.overrides.Load(); o != nil {
		o.apply(p, pq.Match.Hits, t)
	}
	return nil
}

// decide decides q's paths, matched in p (matchQuery), with s.
func (c *Checker) decide(ctx context.Context, p *Policy, q *Query, d *Decision, sc *scratch, s slot) error {
	// A deny list denies the whole decision, which then counts nothing;
	// an allow list is named unless a deny list decides.
	var listed Listed
	said := "" // what Decision.Listed says of listed, made when the policy loaded
	for i := range q.Paths {
		if m := &q.Paths[i].Match; m.Listed.List == "deny" || listed.List == "" {
			listed, said = m.Listed, m.said
			if listed.List == "deny" {
				break
			}
		}
	}
	if listed.List == "deny" {
		refuseAll(q, d, said, 0)
		return nil
	}
	for i := range q.Paths {
		sc.add(&q.Paths[i], q.Time, s, len(q.Paths) > 1)
	}
	// A delay node decides with a reserving plan, which must never see a
	// cost above its limit's burst (algo.Reserving): such a cost is
	// never admitted, and nothing is decided.
	for i, k := 0, 0; i < len(q.Paths); i++ {
		for _, hit := range q.Paths[i].Match.Hits {
			if hit.escalate != nil {
				k++
			}
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
		if s.fresh && s.permit == 0 && slices.ContainsFunc(sc.reqs, isConcurrency) {
			s.permit = permitid.New()
		}
		switch {
		case s.op == algo.Acquire && s.permit == 0:
			pass, err = c.Store.DecideAll(ctx, sc.reqs, sc.results)
		default:
			pass, err = store.DecideSlots(ctx, c.Store, s.op, sc.reqs, s.permit, sc.results)
		}
		if err != nil {
			return err
		}
	}
	d.Levels = d.Levels[:0]
	d.Matched = true
	d.Listed = said
	deny := false
	var delay time.Duration
	k := 0
	for i := range q.Paths {
		pq := &q.Paths[i]
		start := len(d.Levels)
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			if hit.escalate != nil {
				// A level only when it denies: allowed, it limits nothing
				// a caller could spend.
				if r := sc.index[k]; r >= 0 && !sc.results[r].Allowed {
					d.Levels = append(d.Levels, Level{Pattern: hit.Pattern, Name: hit.Name, Key: sc.reqs[r].Key, Limit: hit.escalate.limit, Shadow: hit.Shadow, Result: sc.results[r], form: hit.escalate.plan.form})
				}
				k++
			}
			for j, l := range hit.Limits {
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
				// Field by field into the slice: a Level literal appended is
				// built on the stack and copied whole, which costs more.
				d.Levels = append(d.Levels, Level{})
				lv := &d.Levels[len(d.Levels)-1]
				lv.Pattern, lv.Name, lv.Key, lv.Limit, lv.Shadow, lv.Result = hit.Pattern, hit.Name, sc.reqs[r].Key, l, hit.Shadow, res
				// Under counts: each a denied charge is recorded as a
				// rule, not as a node's debt.
				lv.Owed = !res.Allowed && sc.reqs[r].Cost > 0 && sc.reqs[r].Plan.Debt() && hit.counts == allOrNothing
				lv.form = hit.plans[j].form
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
	if d.Allowed && s.op == algo.Acquire && s.permit != 0 && slices.ContainsFunc(d.Levels, holdsSlots) {
		d.Permit = s.permit
	}
	if d.Allowed {
		d.Delay = delay
	}
	if deny {
		d.Summary = algo.Result{Allowed: false, RetryAfter: algo.Never}
	}
	return nil
}

// applyRequestLimit makes the deepest hit of pq decide by pq.Limit, when
// its node takes a per-request limit and pq.Limit is within its bound.
func applyRequestLimit(pq *PathQuery) error {
	h := &pq.Match.Hits[len(pq.Match.Hits)-1]
	bound := h.requestMax
	if bound == nil {
		pq.LimitIgnored = true
		return nil
	}
	l := *pq.Limit
	// Rates compared without division: Count/Window <= Max/MaxWindow.
	hi1, lo1 := bits.Mul64(uint64(max(l.Count, 0)), uint64(bound.Window))
	hi2, lo2 := bits.Mul64(uint64(bound.Count), uint64(max(l.Window, 0)))
	if l.Count < 1 || l.Window <= 0 || hi1 > hi2 || hi1 == hi2 && lo1 > lo2 {
		return fmt.Errorf("policy: %w: a request's limit of %d per %v on %s: the node takes 1 to %d per %v", store.ErrBadRequest, l.Count, l.Window, h.Pattern, bound.Count, bound.Window)
	}
	p, err := algo.Compile(l)
	if err != nil {
		return fmt.Errorf("policy: %w: a request's limit: %w", store.ErrBadRequest, err)
	}
	// Plans of its own, whose levels make what they show when answered.
	h.Limits, h.plans, h.noDebt = []algo.Limit{l}, []plan{{Plan: p}}, nil
	if h.counts != allOrNothing { // its charges recorded as the node's are
		h.Limits, h.plans, h.noDebt = []algo.Limit{algo.Debt{Limit: l}}, []plan{{Plan: *algo.MustCompile(algo.Debt{Limit: l})}}, []algo.Plan{p}
	}
	// A key of its own per window: the same count whatever the number
	// (as envoyproxy/ratelimit keys a descriptor's limit by its unit).
	h.Key += "#per-" + strconv.FormatInt(int64(l.Window/time.Millisecond), 10) + "ms"
	return nil
}

// overrideLimit makes pq.Limit the one hit of pq (PathQuery.Override),
// counted as the policy counts.
func overrideLimit(pq *PathQuery, counts counting) error {
	l := *pq.Limit
	p, err := algo.Compile(l)
	if err != nil {
		return fmt.Errorf("policy: %w: a request's limit: %w", store.ErrBadRequest, err)
	}
	var ends [16]int
	key, _ := joinEscaped(pq.Path, ends[:0])
	m := &pq.Match
	// node -1: no node's overrides apply to it (they were applied, by
	// match, to the hit it replaces).
	h := Hit{Pattern: m.Pattern, Key: key + "#per-" + strconv.FormatInt(l.Window.Milliseconds(), 10) + "ms", Tag: key, node: -1, counts: counts}
	if len(m.Hits) == 1 && m.Hits[0].Key == key && len(m.Hits[0].Limits) == 1 {
		lim := m.Hits[0].Limits[0]
		if d, ok := lim.(algo.Debt); ok { // counts: each
			lim = d.Limit
		}
		if fw, ok := lim.(algo.FixedWindow); ok && fw.Calendar == (algo.Calendar{}) && fw.Window == l.Window {
			h.Key, h.Tag = key, m.Hits[0].Tag
		}
	}
	h.Limits, h.plans = []algo.Limit{l}, []plan{{Plan: p}}
	if counts != allOrNothing { // its charges recorded as a node's are
		h.Limits, h.plans, h.noDebt = []algo.Limit{algo.Debt{Limit: l}}, []plan{{Plan: *algo.MustCompile(algo.Debt{Limit: l})}}, []algo.Plan{p}
	}
	clear(m.Hits)
	m.Hits = append(m.Hits[:0], h)
	m.Unlimited, m.Unmatched = false, false
	return nil
}

// isConcurrency reports whether a request is of a concurrency limit.
func isConcurrency(r store.Request) bool { return r.Plan.Kind() == algo.KindConcurrency }

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
	reqs    []store.Request
	results []algo.Result
	// index[k] is the request of the k-th limit over every path's hits.
	index []int
	// byKey finds the request of a limit key, when several paths may
	// share one.
	byKey map[string]int
}

// add appends the requests of a path's hits at time t; with merge, a
// limit key already requested adds its cost to that request. A limit that
// op does not decide (a rate limit when renewing or releasing) gets the
// index -1.
func (sc *scratch) add(pq *PathQuery, t time.Time, s slot, merge bool) {
	op := s.op
	watcher := -1 // the requests of escalations, from the last: each watches those after it
	for h := range pq.Match.Hits {
		hit := &pq.Match.Hits[h]
		if hit.escalate != nil {
			if op != algo.Acquire {
				sc.index = append(sc.index, -1)
			} else {
				// Never merged: it watches the requests after it.
				sc.index = append(sc.index, len(sc.reqs))
				sc.reqs = append(sc.reqs, store.Request{Key: escalateKey(hit.Key), Tag: hit.Tag, Plan: &hit.escalate.plan.Plan, Time: t, Shadow: hit.Shadow,
					Watch: watcher, WatchDenials: hit.escalate.denials}) // Watch: see below
				watcher = len(sc.reqs) - 1
			}
		}
		for j := range hit.Limits {
			r := hit.Request(j, pq.Cost)
			r.Time = t
			if hit.noDebt != nil && (s.estimate || pq.Cost == 0 && hit.counts != allOrNothing) {
				// Without debt: a denied estimate records nothing; a peek
				// that counts as Envoy's is denied only past the limit.
				r.Plan, r.Stop = &hit.noDebt[j], false
			}
			if op != algo.Acquire && !isConcurrency(r) {
				sc.index = append(sc.index, -1)
				continue
			}
			if !merge || hit.counts != allOrNothing {
				// Each level of each path on its own (under counts: each
				// a key twice is decided twice, in order).
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
	// Each escalation watches the requests of this path after it (Watch
	// held the one before it, -1 for none); one with none after it (the
	// path ends at its node) is a peek, which only its block denies.
	for i := watcher; i >= 0; {
		r := &sc.reqs[i]
		prev := r.Watch
		r.Watch = len(sc.reqs) - 1 - i
		if r.Watch == 0 {
			r.WatchDenials = false
		}
		i = prev
	}
}

// match sets pq.Match to what pq's path hits in p: every level of the
// walk, or with Exact only the node the whole path reaches (Envoy's
// descriptor), its lists applied.
func (p *Policy) match(pq *PathQuery) error {
	pq.Match = Match{Hits: pq.Match.Hits[:0]}
	p.walk(pq.Path, &pq.Match, func(n *node, seg int, key, tag string, shared bool) {
		if !pq.Exact || seg == len(pq.Path)-1 && len(n.limits) > 0 { // an escalate watches the levels below: not Exact's
			pq.Match.Hits = append(pq.Match.Hits, n.hit(key, tag, shared, pq.Exact))
		}
	})
	if pq.Match.Err != nil {
		return pq.Match.Err
	}
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
