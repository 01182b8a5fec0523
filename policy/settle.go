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

// estimate is Decide of an Estimate (see Estimate).
func (c *Checker) estimate(ctx context.Context, q *Query, d *Decision) error {
	s, ok := c.Store.(store.Settler)
	switch within := q.Within; {
	case !ok:
		return fmt.Errorf("policy: %w: the store keeps no tickets to settle noDebt", algo.ErrUnsupported)
	case len(q.Paths) == 0:
		return fmt.Errorf("policy: %w: an estimate of no path", store.ErrBadRequest)
	case within < store.MinTicket || within > store.MaxTicket:
		return fmt.Errorf("policy: %w: settle within %v: want %v to %v", store.ErrBadRequest, within, store.MinTicket, store.MaxTicket)
	}
	// The estimate is decided at a time the id names: the store's.
	unpin, err := c.pinTime(ctx, q)
	if err != nil {
		return err
	}
	defer unpin()
	p, err := c.matchQuery(q)
	if err != nil {
		return err
	}
	e := estimate{since: q.Time.UnixMicro()}
	for i := range q.Paths {
		pq := &q.Paths[i]
		e.paths, e.exact, e.costs = append(e.paths, pq.Path), append(e.exact, pq.Exact), append(e.costs, pq.Cost)
	}
	e.nonce = newNonce()
	id := e.String()
	if len(id) > MaxEstimateID {
		return fmt.Errorf("policy: %w: the estimate's paths make an id of %d bytes, more than %d", store.ErrBadRequest, len(id), MaxEstimateID)
	}
	// The ticket is kept before anything is decided (a key past its bound
	// decides nothing), and taken back when the estimate is denied.
	var t store.Request
	tag, hits := ticketTag(q)
	if hits {
		t = ticket(id, tag)
		t.Time = q.Time
		if err := s.Issue(ctx, t, q.Within); err != nil {
			return err
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := c.decide(ctx, p, q, d, sc, estimating); err != nil || !d.Allowed {
		if hits {
			s.Settle(ctx, t, nil, algo.Reward) // the ticket, back; on failure it expires
		}
		return err
	}
	d.Ticket = id
	if !hits {
		return nil
	}
	// A bucket's estimate began its n·T at the TAT it found, not at the
	// estimate's time: the id says where, so that a settle gives back all
	// of it that lies ahead. A ticket under that id replaces the first;
	// if it cannot be kept, the first one stands (it gives back less).
	if e.began = tatBegan(q); e.began == nil {
		return nil
	}
	id2 := e.String()
	if len(id2) > MaxEstimateID {
		return nil
	}
	t2 := ticket(id2, tag)
	t2.Time = q.Time
	if err := s.Issue(ctx, t2, q.Within); err != nil {
		return nil
	}
	s.Settle(ctx, t, nil, algo.Reward)
	d.Ticket = id2
	return nil
}

// pinTime sets a zero q.Time to the store's clock (store.Clock), or this
// process's, and returns what sets it back to zero: a ticket's id and the
// decision it opens name one time.
func (c *Checker) pinTime(ctx context.Context, q *Query) (unpin func(), err error) {
	if !q.Time.IsZero() {
		return func() {}, nil
	}
	now := time.Now()
	if clock, ok := c.Store.(store.Clock); ok {
		if now, err = clock.Now(ctx); err != nil {
			return nil, err
		}
	}
	q.Time = now
	return func() { q.Time = time.Time{} }, nil
}

// newNonce is an estimate's nonce: 16 random bytes, so that no two ids
// are the same.
func newNonce() string {
	var random [16]byte
	rand.Read(random[:])
	return base64.RawURLEncoding.EncodeToString(random[:])
}

// tatBegan returns, for each path of a decided query and each of its
// levels in order, how long after the decision its cost's n·T began (a
// GCRA or token bucket level without a delay: its TAT after the decision,
// less n·T of every path's cost on its key, if later than the decision),
// or nil when none began later.
func tatBegan(q *Query) [][]int64 {
	var total map[string]int64 // costs on one key added, as decide adds them
	if len(q.Paths) > 1 {
		total = map[string]int64{}
		for i := range q.Paths {
			for _, l := range q.Paths[i].Levels {
				total[l.Key] += q.Paths[i].Cost
			}
		}
	}
	began := make([][]int64, len(q.Paths))
	later := false
	for i := range q.Paths {
		pq := &q.Paths[i]
		k := 0
		for h := range pq.Match.Hits {
			hit := &pq.Match.Hits[h]
			for j := range hit.Limits {
				if k >= len(pq.Levels) {
					return nil // levels not decided as matched: none named
				}
				l := &pq.Levels[k]
				k++
				cost := pq.Cost
				if total != nil {
					cost = total[l.Key]
				}
				t, err := hit.plans[j].TAT()
				if err != nil || hit.Delay > 0 || cost < 1 || cost > algo.MaxCount/t.Interval {
					began[i] = append(began[i], 0)
					continue
				}
				v := max(l.Result.ResetAfter.Microseconds()-cost*t.Interval, 0)
				later = later || v > 0
				began[i] = append(began[i], v)
			}
		}
		if k != len(pq.Levels) {
			return nil
		}
	}
	if !later {
		return nil
	}
	return began
}

// settle is Decide of a Settle (see Settle).
func (c *Checker) settle(ctx context.Context, sq *Query, d *Decision) (err error) {
	d.Settled, err = c.settleTicket(ctx, sq.Time, sq.Ticket, sq.Paths)
	return err
}

// settleTicket settles the estimate id at time t at the costs of paths, one
// per path of the estimate.
func (c *Checker) settleTicket(ctx context.Context, t time.Time, id string, costs []PathQuery) (bool, error) {
	s, ok := c.Store.(store.Settler)
	if !ok {
		return false, fmt.Errorf("policy: %w: the store keeps no tickets to settle noDebt", algo.ErrUnsupported)
	}
	e, err := parseEstimate(id)
	if err != nil {
		return false, err
	}
	if len(costs) != len(e.paths) {
		return false, fmt.Errorf("policy: %w: the estimate is of %d paths: settle it with %d costs, one per path in its order, not %d", store.ErrBadRequest, len(e.paths), len(e.paths), len(costs))
	}
	q := Query{Time: t, Paths: make([]PathQuery, len(e.paths))}
	for i := range q.Paths {
		q.Paths[i] = PathQuery{Path: e.paths[i], Exact: e.exact[i]}
	}
	if _, err := c.matchQuery(&q); err != nil {
		return false, err
	}
	tag, hits := ticketTag(&q)
	if !hits {
		return true, nil
	}
	// What comes back on each key (negative: what is charged): the
	// noDebt less the real costs of the paths on it.
	type change struct {
		r    store.Request
		back int64
	}
	var changes []change
	byKey := map[string]int{}
	for i := range q.Paths {
		m := &q.Paths[i].Match
		levels := 0
		for h := range m.Hits {
			levels += len(m.Hits[h].Limits)
		}
		var began []int64
		if i < len(e.began) && len(e.began[i]) == levels {
			began = e.began[i] // the levels as the id names them
		}
		k := 0
		for h := range m.Hits {
			hit := &m.Hits[h]
			for j := range hit.Limits {
				r := hit.Request(j, 0)
				// Given back where the estimate was counted: at its time,
				// or where its n·T began.
				since := e.since
				if began != nil {
					since += began[k]
				}
				k++
				if isConcurrency(r) {
					continue
				}
				r.Time = time.UnixMicro(since)
				if x, ok := byKey[r.Key]; ok {
					changes[x].back += e.costs[i] - costs[i].Cost
					continue
				}
				byKey[r.Key] = len(changes)
				changes = append(changes, change{r, e.costs[i] - costs[i].Cost})
			}
		}
	}
	var back, charge []store.Request
	for _, ch := range changes {
		r := ch.r
		switch {
		case ch.back > 0 && e.since > 0:
			if r.Cost = ch.back; r.Plan.ValidateAdjust(algo.Reward, r.Cost) == nil {
				back = append(back, r)
			}
		case ch.back < 0:
			if r.Cost, r.Time = -ch.back, t; r.Plan.ValidateAdjust(algo.Penalize, r.Cost) == nil {
				charge = append(charge, r)
			}
		}
	}
	tk := ticket(id, tag)
	tk.Time = t
	if len(charge) == 0 {
		return s.Settle(ctx, tk, back, algo.Reward)
	}
	settled, err := s.Settle(ctx, tk, charge, algo.Penalize)
	if !settled || err != nil || len(back) == 0 {
		return settled, err
	}
	// The give-back, under a ticket of its own that no id names, kept
	// for as long as a settle may take. A key whose bound another
	// estimate has just filled again keeps the estimate counted.
	tk = ticket(id+".back", tag)
	tk.Time = t
	if err := s.Issue(ctx, tk, time.Minute); errors.Is(err, store.ErrTooManyTickets) {
		return true, nil
	} else if err != nil {
		return true, err
	}
	_, err = s.Settle(ctx, tk, back, algo.Reward)
	return true, err
}

// ticketTag returns the tag an estimate's ticket is placed with: the last
// path's own level, the last hit of the last path that hits one (its Tag,
// or its Key), so that on a Cluster the ticket and that level share a
// slot, and the key's bound on open tickets (store.MaxOpenTickets) is the
// caller's own; false when no path hits a level.
func ticketTag(q *Query) (string, bool) {
	for i := len(q.Paths) - 1; i >= 0; i-- {
		if tag, ok := matchTag(&q.Paths[i].Match); ok {
			return tag, true
		}
	}
	return "", false
}

// matchTag is a matched path's own level: its last hit's Tag, or Key;
// false when it hits none.
func matchTag(m *Match) (string, bool) {
	if len(m.Hits) == 0 {
		return "", false
	}
	h := &m.Hits[len(m.Hits)-1]
	if h.Tag != "" {
		return h.Tag, true
	}
	return h.Key, true
}

// ticket is the store's ticket of an estimate's id, placed by tag
// (ticketTag): named by a hash of the whole id, so that a forged or
// altered id names no ticket.
func ticket(id, tag string) store.Request {
	sum := sha256.Sum256([]byte(id))
	return store.Request{Key: tag + "#settle:" + hex.EncodeToString(sum[:16]), Tag: tag}
}

// estimate is what an estimate's id says: its paths (each exact, as a
// gRPC descriptor's, or not) and their costs, a random nonce that makes
// each id unguessable, when it was counted (µs; 0 for an id of the first
// form, "e1", which gives nothing back), and, for each path, how long
// after that each of its levels' n·T began (tatBegan; nil: at once).
type estimate struct {
	nonce string
	costs []int64
	exact []bool
	paths [][]string
	since int64
	began [][]int64
}

// MaxEstimateID bounds the length of an estimate's id (a settle_id): an
// estimate whose paths would make a longer one is refused before anything
// is decided. A path of 64 segments of ordinary length fits, as do 16
// paths of a few.
const MaxEstimateID = 8 << 10

// String is the id. An estimate of one path has the form "e2.<nonce>.
// <cost>.<p|x>.<the path as base64url JSON>.<since>.<began,
// comma-separated, or empty>", as before noDebt of several paths; one
// of several: "e3.<nonce>.<costs, comma-separated>.<p or x per path>.<the
// paths as base64url JSON>.<since>.<each path's began, comma-separated,
// the paths' joined by '~', or empty>". Both are URL-safe.
func (e estimate) String() string {
	b := make([]byte, 0, 128)
	version, paths := "e3.", any(e.paths)
	if len(e.paths) == 1 {
		version, paths = "e2.", e.paths[0]
	}
	b = append(append(append(b, version...), e.nonce...), '.')
	for i, c := range e.costs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, c, 10)
	}
	b = append(b, '.')
	for _, x := range e.exact {
		c := byte('p')
		if x {
			c = 'x'
		}
		b = append(b, c)
	}
	js, _ := json.Marshal(paths)
	b = append(append(b, '.'), base64.RawURLEncoding.EncodeToString(js)...)
	b = strconv.AppendInt(append(b, '.'), e.since, 10)
	b = append(b, '.')
	for i, g := range e.began {
		if i > 0 {
			b = append(b, '~')
		}
		for j, v := range g {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return string(b)
}

var errEstimateID = errors.New("not an estimate's id (settle_id) as a check returned it")

func parseEstimate(id string) (estimate, error) {
	bad := func() (estimate, error) {
		return estimate{}, fmt.Errorf("policy: %w: %w", store.ErrBadRequest, errEstimateID)
	}
	parts := strings.Split(id, ".")
	switch {
	case len(id) > MaxEstimateID:
		return bad()
	case len(parts) == 5 && parts[0] == "e1":
	case len(parts) == 7 && (parts[0] == "e2" || parts[0] == "e3"):
	default:
		return bad()
	}
	e := estimate{nonce: parts[1]}
	if len(parts[1]) != 22 {
		return bad()
	}
	for _, f := range strings.Split(parts[2], ",") {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 || v > algo.MaxCount {
			return bad()
		}
		e.costs = append(e.costs, v)
	}
	for _, k := range parts[3] {
		if k != 'p' && k != 'x' {
			return bad()
		}
		e.exact = append(e.exact, k == 'x')
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[4])
	if err != nil {
		return bad()
	}
	if parts[0] == "e3" {
		err = json.Unmarshal(raw, &e.paths)
	} else {
		e.paths = [][]string{nil}
		err = json.Unmarshal(raw, &e.paths[0])
	}
	if err != nil || len(e.costs) != len(e.paths) || len(e.exact) != len(e.paths) || slices.ContainsFunc(e.paths, func(p []string) bool { return len(p) == 0 }) {
		return bad()
	}
	if parts[0] == "e1" {
		return e, nil
	}
	if e.since, err = strconv.ParseInt(parts[5], 10, 64); err != nil || e.since < 0 || e.since > algo.MaxTime {
		return bad()
	}
	if parts[6] == "" {
		return e, nil
	}
	groups := strings.Split(parts[6], "~")
	if len(groups) != len(e.paths) {
		return bad()
	}
	e.began = make([][]int64, len(groups))
	for i, g := range groups {
		if g == "" {
			continue
		}
		for _, f := range strings.Split(g, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil || v < 0 || v > algo.MaxTime {
				return bad()
			}
			e.began[i] = append(e.began[i], v)
		}
	}
	return e, nil
}
