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
// is ever given back that was not settled. The error wraps
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
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := c.decide(ctx, q, d, sc, slot{op: algo.Acquire, estimate: true}); err != nil || !d.Allowed {
		return "", err
	}
	pq := &q.Paths[0]
	e := estimate{path: pq.Path, exact: pq.Exact, cost: pq.Cost}
	var random [16]byte
	rand.Read(random[:])
	e.nonce = base64.RawURLEncoding.EncodeToString(random[:])
	id := e.String()
	t := ticket(id, &pq.Match)
	t.Time = q.Time
	if err := s.Issue(ctx, t, within); err != nil {
		return "", err
	}
	return id, nil
}

// Settle settles the estimate id at its real cost: every level of its
// path whose limit counts both ways (any but a gate and concurrency slots)
// gets back what the estimate took beyond cost, or records
// what cost took beyond the estimate (a penalty, past the limit if need
// be), in one atomic step with taking its ticket. It reports false,
// changing nothing, for an id settled already, not settled within its
// time or never issued (a forged one), and for a path the policy in force
// no longer limits with the same levels. The error wraps
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
	var reqs []store.Request
	for h := range m.Hits {
		hit := &m.Hits[h]
		for j := range hit.Limits {
			r := hit.Request(j, units)
			r.Time = t
			if units > 0 && !takesSlots(r) && r.Plan.ValidateAdjust(op, units) == nil {
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
// and the level share a slot.
func ticket(id string, m *Match) store.Request {
	sum := sha256.Sum256([]byte(id))
	name := "settle:" + hex.EncodeToString(sum[:16])
	if n := len(m.Hits); n > 0 && m.Hits[n-1].Tag != "" {
		tag := m.Hits[n-1].Tag
		return store.Request{Key: tag + "#" + name, Tag: tag}
	}
	return store.Request{Key: name}
}

// estimate is what an estimate's id says: its path (exact, as a gRPC
// descriptor's, or not), its cost, and a random nonce that makes each id
// unguessable.
type estimate struct {
	nonce string
	cost  int64
	exact bool
	path  []string
}

// maxEstimateID bounds an id's length: a path of maxSegments segments of
// ordinary length fits.
const maxEstimateID = 8 << 10

// String is the id: "e1.<nonce>.<cost>.<p|x>.<the path as base64url JSON>".
func (e estimate) String() string {
	path, _ := json.Marshal(e.path)
	kind := "p"
	if e.exact {
		kind = "x"
	}
	return "e1." + e.nonce + "." + strconv.FormatInt(e.cost, 10) + "." + kind + "." + base64.RawURLEncoding.EncodeToString(path)
}

var errEstimateID = errors.New("not an estimate's id (settle_id) as a check returned it")

func parseEstimate(id string) (estimate, error) {
	bad := func() (estimate, error) {
		return estimate{}, fmt.Errorf("policy: %w: %w", store.ErrBadRequest, errEstimateID)
	}
	parts := strings.Split(id, ".")
	if len(id) > maxEstimateID || len(parts) != 5 || parts[0] != "e1" || len(parts[1]) != 22 || (parts[3] != "p" && parts[3] != "x") {
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
	return e, nil
}
