// Package redis is Sluice's Redis store: every decision is one atomic Lua
// script, run with EVALSHA (and loaded again on NOSCRIPT); concurrent
// decisions on one server share a call (coalesce.go), each still all or
// nothing on its own. The scripts live in scripts/*.lua, embedded in the
// binary; keys reach them only as KEYS. Time comes from Redis TIME unless
// the request carries its own, so clients with skewed clocks still agree.
//
// Two options decide without a round trip, never admitting more than a
// limit allows (docs/beyond-one-round-trip.md): OverLimitCache repeats a
// denial while it stands (overlimit.go), and LeaseFor admits
// a hot fixed-window key's requests from units leased ahead (lease.go);
// Grant gives such units to a client that admits on its own.
//
// The scripts return the raw outcome of the algorithm's step (allowed, now
// and the new state), and the store derives the Result with the same Go
// functions the memory store uses, so both stores give the same answers.
// The windowed algorithms (sliding_log.lua, window_counter.lua) also
// report what only the script can see: the admitted count, the wait, the
// reset and the count in each window, from which algo.Outcome derives the
// Result.
package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// keyName returns the Redis key that holds the state of a request's key
// and tag: prefix + key without a tag, prefix + "{" + tag + "}" + the rest
// of key with one. '%', '{' and '}' in key are percent-encoded first, so
// every (key, tag) has its own Redis key and only the tag picks a hash slot.
func keyName(prefix, key, tag string) string {
	if strings.ContainsAny(key, "%{}") {
		key, tag = braceEscaper.Replace(key), braceEscaper.Replace(tag)
	}
	if tag == "" {
		return prefix + key
	}
	return prefix + "{" + tag + "}" + key[len(tag):]
}

var braceEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// StateKey is the Redis key of a request's state: keyName, then, for the
// algorithms whose state is not one TAT, the shape of the plan's state
// (algo.Plan.ShapeKey: "%:", the algorithm's name and the layout's
// numbers, such as "%:fixed_window"; no escaped key holds "%:"), so
// that a limit whose algorithm or layout changed (a policy reload) finds
// no state of another type (no WRONGTYPE) and starts cleanly; the old
// key expires. A request without a plan (Reset) names the TAT key.
func StateKey(prefix string, r store.Request) string {
	name := keyName(prefix, r.Key, r.Tag)
	if r.Plan == nil {
		return name
	}
	return name + r.Plan.ShapeKey()
}

func (s *Store) stateKey(r store.Request) string { return StateKey(s.prefix, r) }

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, req store.Request) (algo.Result, error) {
	var res [1]algo.Result
	_, err := s.decide(ctx, []store.Request{req}, res[:], true)
	return res[0], err
}

// DecideAll implements store.Store: one script call checks every request
// and records the costs only if every request that is not Shadow passes.
// On Redis Cluster, requests whose keys lie in several hash slots take one
// script call per hash slot, in parallel, each reserving its cost if its own
// levels pass; if any hash slot denies, the hash slots that reserved are refunded
// (refund.lua). Between a reservation and its refund the reserved cost
// counts in its hash slot, so a concurrent request there may be denied for
// capacity about to come back: the window errs towards denying, never
// admits more than a limit, and lasts one round trip. All hash slots decide at
// one time (one node's TIME, read first, when the requests carry none).
func (s *Store) DecideAll(ctx context.Context, reqs []store.Request, results []algo.Result) (bool, error) {
	return s.decide(ctx, reqs, results, false)
}

// decide is DecideAll; with own, reqs is the store's own slice (Decide's),
// which check may change in place rather than copy.
func (s *Store) decide(ctx context.Context, orig []store.Request, results []algo.Result, own bool) (bool, error) {
	reqs, err := batch(orig, results, own)
	if err != nil {
		return false, err
	}
	for i := range reqs {
		if !reqs[i].Global {
			continue
		}
		if s.globals == nil {
			// No home: this store is its own, and decides the limit as
			// any other.
			if !own && &reqs[0] == &orig[0] {
				reqs = slices.Clone(reqs)
			}
			reqs[i].Global = false
		} else if err := s.global(&reqs[i]); err != nil {
			return false, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if s.leases != nil {
		for i := range reqs {
			// Lease code runs only for a request that asks for a lease
			// (its node says lease: true), which most do not.
			if !reqs[i].Lease {
				continue
			}
			if _, ok := leasable(&reqs[i]); ok {
				return s.decideLeased(ctx, reqs, results)
			}
		}
	}
	if s.denials != nil {
		return s.decideCached(ctx, reqs, results)
	}
	return s.decideAll(ctx, reqs, results)
}

// batch checks the requests of a DecideAll (store.ValidateAll) and returns
// them with the plans to apply in a batch of several (algo.InBatch: a nary
// log is all or nothing), in a copy unless own when a plan changes.
func batch(reqs []store.Request, results []algo.Result, own bool) ([]store.Request, error) {
	if err := store.ValidateAll(reqs, results); err != nil {
		return nil, err
	}
	if len(reqs) == 1 {
		return reqs, nil
	}
	out := reqs
	for i := range reqs {
		if p := algo.InBatch(reqs[i].Plan); p != reqs[i].Plan {
			if !own && &out[0] == &reqs[0] {
				out = slices.Clone(reqs)
			}
			out[i].Plan = p
		}
	}
	return out, nil
}

// decideAll is DecideAll on compiled requests, without the over-limit cache.
func (s *Store) decideAll(ctx context.Context, reqs []store.Request, results []algo.Result) (bool, error) {
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.leave()
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = s.stateKey(r)
	}
	if s.client().Mode() == rueidis.ClientModeCluster {
		if groups := hashSlotGroups(keys); len(groups) > 1 {
			return s.decideAcrossHashSlots(ctx, reqs, keys, groups, results)
		}
	}
	c, err := s.check(ctx, reqs, keys)
	if err != nil {
		return false, err
	}
	for i, r := range reqs {
		results[i] = levelResult(r, c.now, c.ok[i], c.val[i], c.extra(i), committed(r, c.ok[i], c.pass, c.stopped))
	}
	return c.pass, nil
}

// checked is decide.lua's reply for a group of requests.
type checked struct {
	now  int64
	pass bool
	// stopped: a level was not ok, so that the levels that stop
	// (store.Request.Stop) and were ok recorded nothing.
	stopped bool
	ok      []bool
	val     []int64
	args    []string // the script's ARGV, kept for a refund
	set     kindSet  // the kinds the levels use: which composed script ran
	v       []int64  // the reply
	at      []int    // at[i]: index in v of level i's code; at[len] = len(v)
}

// extra returns level i's values after ok and value (sliding_log.lua and
// window_counter.lua report more).
func (c checked) extra(i int) []int64 { return c.v[c.at[i]+2 : c.at[i+1]] }

// check runs decide.lua on requests whose keys share one hash slot (or on any
// keys of a single server).
func (s *Store) check(ctx context.Context, reqs []store.Request, keys []string) (checked, error) {
	args := make([]string, 1, 1+6*len(reqs))
	if t := reqs[0].Time; !t.IsZero() {
		args[0] = strconv.FormatInt(t.UnixMicro(), 10)
	}
	var set kindSet
	for _, r := range reqs {
		set |= 1 << r.Plan.Kind()
		args = appendLevel(args, bindings[r.Plan.Kind()], r)
	}
	keys, err := blockKeys(reqs, keys, s.client().Mode() == rueidis.ClientModeCluster)
	if err != nil {
		return checked{}, err
	}
	v, err := s.exec(ctx, set, keys, args, len(reqs))
	if err != nil {
		return checked{}, err
	}
	c := checked{now: v[0], pass: v[1]&1 == 1, stopped: v[1]&2 != 0, ok: make([]bool, len(reqs)), val: make([]int64, len(reqs)), args: args, set: set, v: v, at: make([]int, len(reqs)+1)}
	p := 2
	for i, r := range reqs {
		if p+1 >= len(v) {
			return checked{}, fmt.Errorf("redis store: script replied %d values for %d keys", len(v), len(reqs))
		}
		code := v[p]
		if code < 0 || code>>1 != bindings[r.Plan.Kind()].extras(r.Plan)+blockExtras(r.Plan) {
			return checked{}, fmt.Errorf("redis store: script replied code %d for key %d (%v)", code, i, r.Plan.Kind())
		}
		c.at[i] = p
		c.ok[i], c.val[i] = code&1 == 1, v[p+1]
		p += 2 + int(code>>1)
	}
	if p != len(v) {
		return checked{}, fmt.Errorf("redis store: script replied %d values for %d keys", len(v), len(reqs))
	}
	c.at[len(reqs)] = p
	return c, nil
}

// appendLevel appends a level's arguments for decide.lua: kind, flag,
// argument count, arguments, then a block's (block.lua).
func appendLevel(args []string, b *binding, r store.Request) []string {
	blk, blocks := r.Plan.Blocks()
	// "s" shadow, "b" a block, "d" a debt (which has no block), "o" a
	// debt that stops, "p" a debt's peek: checked as a cost of 1 and never
	// committed (algo.Debt).
	flag := "-"
	cost, peek := r.Cost, r.Cost == 0 && r.Plan.Debt()
	if peek {
		cost = 1
	}
	switch debt := r.Plan.Debt(); {
	case r.Shadow && blocks:
		flag = "sb"
	case r.Shadow && debt:
		flag = "sd"
	case r.Shadow:
		flag = "s"
	case blocks:
		flag = "b"
	case debt:
		flag = "d"
	}
	if r.Watch > 0 { // a node's escalate: "w<n>" counts blocks, "W<n>" denials
		w := "w"
		if r.WatchDenials {
			w = "W"
		}
		flag += w + strconv.Itoa(r.Watch)
	}
	if r.Stop { // a debt that stops (store.Request.Stop)
		flag += "o"
	}
	if peek {
		flag += "p"
	}
	if r.Global { // a region's share of a global limit (global.go)
		flag += "g"
	}
	args = append(args, b.letter, flag, "")
	n := len(args)
	args = calendarWindows(b.args(args, r.Plan, cost), r.Plan, r.Time)
	args[n-1] = strconv.Itoa(len(args) - n)
	if blocks {
		blk = blk.WithDefaults()
		args = append(args, itoa(blk.For.Microseconds()), strconv.FormatFloat(blk.Growth, 'g', -1, 64),
			itoa(blk.Max.Microseconds()), itoa(blk.ForgetAfter.Microseconds()), itoa(r.Cost))
	}
	return args
}

// blockExtras is the extra value a level with a block replies: when its
// block ends.
func blockExtras(p *algo.Plan) int64 {
	if _, ok := p.Blocks(); ok {
		return 1
	}
	return 0
}

// blockKey is the Redis key of the block of the state whose key is
// state: in its hash slot, and no escaped key holds "%:".
func blockKey(state string) string { return state + "%:block" }

// blockKeys returns the script's KEYS for requests whose state keys are
// keys: each level's key, followed by its block key (the state key +
// "%:block", in the same hash slot by the request's Tag) for a level with a
// block. On Redis Cluster a level with a block needs a Tag, without which
// the two keys may lie in two hash slots.
func blockKeys(reqs []store.Request, keys []string, cluster bool) ([]string, error) {
	var out []string
	for i, r := range reqs {
		if _, ok := r.Plan.Blocks(); !ok {
			if out != nil {
				out = append(out, keys[i])
			}
			continue
		}
		if cluster && r.Tag == "" {
			return nil, fmt.Errorf("%w: a limit with a block needs the request's Tag on Redis Cluster (its block key must share the state's hash slot)", store.ErrBadRequest)
		}
		if out == nil {
			out = append(make([]string, 0, len(keys)+1), keys[:i]...)
		}
		out = append(out, keys[i], blockKey(keys[i]))
	}
	if out == nil {
		return keys, nil
	}
	return out, nil
}

// windowResult derives a windowed level's Result from the script's extra
// values: admitted, wait, reset, denied by, the counts. For a level that
// was not ok they describe the state after the commit; for an ok level,
// the state without the cost, and a committed ok level adds the cost to
// the counts and takes recordedReset() as its reset.
func windowResult(ws []algo.Window, now, cost int64, ok, committed, floor bool, extra []int64, recordedReset func() int64) algo.Result {
	o := algo.Outcome{Admitted: extra[0], Wait: extra[1], Reset: extra[2], DeniedBy: int(extra[3])}
	var add int64
	switch {
	case ok && committed && cost > 0:
		add, o.Reset = cost, recordedReset()
	case ok:
		o.Admitted, cost = 0, 0 // not recorded (or a peek): the state without the cost
	}
	o.Remaining = ws[0].Count - extra[4] - add
	var limit int64 = ws[0].Count
	for i, w := range ws[1:] {
		o.Remaining = min(o.Remaining, w.Count-extra[5+i]-add)
		limit = min(limit, w.Count)
	}
	return o.Result(now, cost, limit, floor)
}

// committed reports whether decide.lua committed a level that was ok or
// not, in a decision that passed or not: a level not ok (to record its
// attempt, or its debt), every level of a decision that passed, and a
// level with debt whatever the others decided, unless it stops
// (store.Request.Stop) and a level was not ok (stopped).
func committed(r store.Request, ok, pass, stopped bool) bool {
	if r.Stop {
		return !ok || !stopped
	}
	return !ok || pass || r.Plan.Debt()
}

// levelResult derives a level's Result from the script's check value (and
// extra values). A level that was ok but not committed (another level
// denied) reports what a peek would: its state without this cost.
func levelResult(r store.Request, now int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
	if _, blocks := r.Plan.Blocks(); blocks {
		st := algo.BlockState{Until: extra[len(extra)-1]}
		if st.Blocked(now) { // under a block, or its denial started one
			q, _ := algo.Quota(r.Plan.Limit())
			return st.Result(now, q)
		}
		extra = extra[:len(extra)-1]
	}
	if r.Plan.Debt() {
		if r.Cost == 0 {
			// A debt's peek, checked as a cost of 1 and not committed:
			// denied, that cost's denial; else what a peek reports.
			return bindings[r.Plan.Kind()].result(r.Plan, now, 1, ok, val, extra, !ok)
		}
		if !ok { // a charge recorded: nothing remains after it
			res := bindings[r.Plan.Kind()].result(r.Plan, now, r.Cost, ok, val, extra, committed)
			res.Remaining = 0
			return res
		}
	}
	return bindings[r.Plan.Kind()].result(r.Plan, now, r.Cost, ok, val, extra, committed)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
