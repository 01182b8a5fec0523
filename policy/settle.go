package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Estimate decides the one path of q at its cost, an estimate of a cost
// known only later (the tokens of a response, written as max_tokens), and,
// when it is admitted, returns the id to Settle it with, for within
// (store.MinTicket to store.MaxTicket). A denied estimate records nothing,
// even on a level with debt: the request does not go on. An estimate not settled within
// that time stays counted in full, as if its holder had crashed: nothing
// is ever given back that was not settled. The id says when the estimate
// was counted (q.Time, or the store's clock when zero): a settle gives
// back only there. Its ticket is kept with the path's own level, whose key
// holds at most store.MaxOpenTickets open: one more is refused, before
// anything is decided, with store.ErrTooManyTickets. The error wraps
// store.ErrBadRequest for a query of several paths or a bad within, and
// algo.ErrUnsupported for a store without tickets (store.Settler).
func (c *Checker) Estimate(ctx context.Context, q *Query, d *Decision, within time.Duration) (string, error) {
	s, ok := c.Store.(store.Settler)
	switch {
	case !ok:
		return "", fmt.Errorf("policy: %w: the store keeps no tickets to settle estimates", algo.ErrUnsupported)
	case len(q.Paths) != 1:
		return "", fmt.Errorf("policy: %w: an estimate is of one path, not %d", store.ErrBadRequest, len(q.Paths))
	case within < store.MinTicket || within > store.MaxTicket:
		return "", fmt.Errorf("policy: %w: settle within %v: want %v to %v", store.ErrBadRequest, within, store.MinTicket, store.MaxTicket)
	}
	if q.Time.IsZero() {
		// The estimate is decided at a time the id names: the store's.
		now := time.Now()
		if clock, ok := c.Store.(store.Clock); ok {
			var err error
			if now, err = clock.Now(ctx); err != nil {
				return "", err
			}
		}
		q.Time = now
		defer func() { q.Time = time.Time{} }()
	}
	pq := &q.Paths[0]
	if err := c.match(c.Policy.Load(), pq, q.Time); err != nil {
		return "", err
	}
	e := estimate{path: pq.Path, exact: pq.Exact, cost: pq.Cost, since: q.Time.UnixMicro()}
	var random [16]byte
	rand.Read(random[:])
	e.nonce = base64.RawURLEncoding.EncodeToString(random[:])
	// The ticket is kept before anything is decided (a key past its bound
	// decides nothing), and taken back when the estimate is denied.
	var t store.Request
	hits := len(pq.Match.Hits) > 0
	if hits {
		t = ticket(e.String(), &pq.Match)
		t.Time = q.Time
		if err := s.Issue(ctx, t, within); err != nil {
			return "", err
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := c.decide(ctx, q, d, sc, slot{op: algo.Acquire, estimate: true}); err != nil || !d.Allowed {
		if hits {
			s.Settle(ctx, t, nil, algo.Reward) // the ticket, back; on failure it expires
		}
		return "", err
	}
	if !hits {
		return e.String(), nil
	}
	// A bucket's estimate began its n·T at the TAT it found, not at the
	// estimate's time: the id says where, so that a settle gives back all
	// of it that lies ahead. A ticket under that id replaces the first;
	// if it cannot be kept, the first one stands (it gives back less).
	if e.began = tatBegan(pq, e.cost); e.began == nil {
		return e.String(), nil
	}
	id := e.String()
	t2 := ticket(id, &pq.Match)
	t2.Time = q.Time
	if err := s.Issue(ctx, t2, within); err != nil {
		e.began = nil
		return e.String(), nil
	}
	s.Settle(ctx, t, nil, algo.Reward)
	return id, nil
}

// tatBegan returns, for each level of a decided path in order, how long
// after the decision its cost's n·T began (a GCRA or token bucket level
// without a delay: its TAT after the decision, less n·T, if later than the
// decision), or nil when none began later.
func tatBegan(pq *PathQuery, cost int64) []int64 {
	var began []int64
	k := 0
	for h := range pq.Match.Hits {
		hit := &pq.Match.Hits[h]
		for j := range hit.Limits {
			if k >= len(pq.Levels) {
				return nil // levels not decided as matched: none named
			}
			res := pq.Levels[k].Result
			k++
			t, err := hit.plans[j].TAT()
			if err != nil || hit.Delay > 0 || cost < 1 || cost > algo.MaxCount/t.Interval {
				began = append(began, 0)
				continue
			}
			began = append(began, max(algo.Micros(res.ResetAfter)-cost*t.Interval, 0))
		}
	}
	if k != len(pq.Levels) || !slices.ContainsFunc(began, func(v int64) bool { return v > 0 }) {
		return nil
	}
	return began
}

// Settle settles the estimate id at its real cost: every level of its
// path whose limit counts both ways (any but a gate and concurrency slots)
// gets back what the estimate took beyond cost, but only what of it still
// counts in the window the estimate was counted in (algo.Plan.GiveBack:
// nothing once that window has ended, never to a later one), or records
// what cost took beyond the estimate (a penalty, past the limit if need
// be, now), in one atomic step with taking its ticket. It reports false,
// changing nothing, for an id settled already, not settled within its
// time or never issued (a forged one), and true, changing nothing, for a
// path the policy in force does not limit. The error wraps
// store.ErrBadRequest for a malformed id or a cost outside 0..MaxCount.
func (c *Checker) Settle(ctx context.Context, t time.Time, id string, cost int64) (bool, error) {
	s, ok := c.Store.(store.Settler)
	if !ok {
		return false, fmt.Errorf("policy: %w: the store keeps no tickets to settle estimates", algo.ErrUnsupported)
	}
	e, err := parseEstimate(id)
	if err != nil {
		return false, err
	}
	if cost < 0 || cost > algo.MaxCount {
		return false, fmt.Errorf("policy: %w: cost %d is outside 0..%d", store.ErrBadRequest, cost, algo.MaxCount)
	}
	op, units := algo.Reward, e.cost-cost
	if cost > e.cost {
		op, units = algo.Penalize, cost-e.cost
	}
	pq := PathQuery{Path: e.path, Exact: e.exact}
	if err := c.match(c.Policy.Load(), &pq, t); err != nil {
		return false, err
	}
	m := &pq.Match
	if len(m.Hits) == 0 {
		return true, nil
	}
	levels := 0
	for h := range m.Hits {
		levels += len(m.Hits[h].Limits)
	}
	var reqs []store.Request
	k := 0
	for h := range m.Hits {
		hit := &m.Hits[h]
		for j := range hit.Limits {
			r := hit.Request(j, units)
			r.Time = t
			if op == algo.Reward {
				// Given back where the estimate was counted: at its time,
				// or where its n·T began (the levels as the id names them).
				since := e.since
				if len(e.began) == levels {
					since += e.began[k]
				}
				r.Time = time.UnixMicro(since)
			}
			k++
			if units > 0 && !takesSlots(r) && r.Plan.ValidateAdjust(op, units) == nil && (op == algo.Penalize || e.since > 0) {
				reqs = append(reqs, r)
			}
		}
	}
	tk := ticket(id, m)
	tk.Time = t
	return s.Settle(ctx, tk, reqs, op)
}

// ticket is the store's ticket of an estimate's id: named by a hash of the
// whole id (a forged or altered id names no ticket), placed with the
// path's own level (the last hit's tag), so that on a Cluster the ticket
// and the level share a slot, and the key's bound on open tickets
// (store.MaxOpenTickets) is the caller's own.
func ticket(id string, m *Match) store.Request {
	sum := sha256.Sum256([]byte(id))
	name := "settle:" + hex.EncodeToString(sum[:16])
	tag := ""
	if n := len(m.Hits); n > 0 {
		if tag = m.Hits[n-1].Tag; tag == "" {
			tag = m.Hits[n-1].Key
		}
	}
	return store.Request{Key: tag + "#" + name, Tag: tag}
}

// estimate is what an estimate's id says: its path (exact, as a gRPC
// descriptor's, or not), its cost, a random nonce that makes each id
// unguessable, when it was counted (µs; 0 for an id of the first form,
// "e1", which gives nothing back), and how long after that each level's
// n·T began (tatBegan; nil: at once).
type estimate struct {
	nonce string
	cost  int64
	exact bool
	path  []string
	since int64
	began []int64
}

// maxEstimateID bounds an id's length: a path of maxSegments segments of
// ordinary length fits.
const maxEstimateID = 8 << 10

// String is the id: "e2.<nonce>.<cost>.<p|x>.<the path as base64url
// JSON>.<since>.<began, comma-separated, or empty>".
func (e estimate) String() string {
	path, _ := json.Marshal(e.path)
	kind := "p"
	if e.exact {
		kind = "x"
	}
	b := make([]byte, 0, 64)
	for i, v := range e.began {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return "e2." + e.nonce + "." + strconv.FormatInt(e.cost, 10) + "." + kind + "." + base64.RawURLEncoding.EncodeToString(path) +
		"." + strconv.FormatInt(e.since, 10) + "." + string(b)
}

var errEstimateID = errors.New("not an estimate's id (settle_id) as a check returned it")

func parseEstimate(id string) (estimate, error) {
	bad := func() (estimate, error) {
		return estimate{}, fmt.Errorf("policy: %w: %w", store.ErrBadRequest, errEstimateID)
	}
	parts := strings.Split(id, ".")
	switch {
	case len(id) > maxEstimateID:
		return bad()
	case len(parts) == 5 && parts[0] == "e1":
	case len(parts) == 7 && parts[0] == "e2":
	default:
		return bad()
	}
	if len(parts[1]) != 22 || (parts[3] != "p" && parts[3] != "x") {
		return bad()
	}
	e := estimate{nonce: parts[1], exact: parts[3] == "x"}
	var err error
	if e.cost, err = strconv.ParseInt(parts[2], 10, 64); err != nil || e.cost < 0 || e.cost > algo.MaxCount {
		return bad()
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[4])
	if err != nil || json.Unmarshal(raw, &e.path) != nil || len(e.path) == 0 {
		return bad()
	}
	if parts[0] == "e1" {
		return e, nil
	}
	if e.since, err = strconv.ParseInt(parts[5], 10, 64); err != nil || e.since < 0 || e.since > algo.MaxTime {
		return bad()
	}
	if parts[6] != "" {
		for _, f := range strings.Split(parts[6], ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil || v < 0 || v > algo.MaxTime {
				return bad()
			}
			e.began = append(e.began, v)
		}
	}
	return e, nil
}
