package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Envoy's protocol carries no id from a stream's start to its end: the
// end gives back the estimate of the same descriptor with
// is_negative_hits. A Check pairs them through the store
// (store.TicketQueue): an admitted Start opens a ticket in the queue of
// its path and cost, and an End takes the oldest, so that nothing is
// given back that no start took, and only where that start counted it.

// streams reports whether a query's paths hold a stream's End, and a
// Start.
func streams(q *Query) (ends, starts bool) {
	for i := range q.Paths {
		ends, starts = ends || q.Paths[i].End, starts || q.Paths[i].Start
	}
	return ends, starts
}

// decideStarts decides q as a Check does; when it is admitted, each Start
// path whose cost is 1 or more on a level that gives back (a limit that
// counts both ways, without debt) opens a ticket of the estimate it took,
// queued by its path and cost, for as long as a give-back could still
// find it counted (its levels' ResetAfter) and at least an hour
// (minStartLife), which an End takes. Such a query is decided at an
// explicit time (q.Time, or the store's clock), which the ticket names. A
// ticket that cannot be kept (the key holds store.MaxOpenTickets, the
// store failed) leaves the start admitted and counted, with nothing to
// give back. A query with no such path, or a store without ticket queues,
// costs what a Check does.
func (c *Checker) decideStarts(ctx context.Context, q *Query, d *Decision) error {
	s, ok := c.Store.(store.TicketQueue)
	if !ok {
		return c.decideOp(ctx, q, d)
	}
	p := c.Policy.Load()
	open := uint64(0)
	for i := range q.Paths {
		pq := &q.Paths[i]
		if i >= 64 || !pq.Start || pq.Cost < 1 || pq.Path == nil {
			continue
		}
		if err := c.match(p, pq, q.Time); err != nil {
			return err
		}
		if givesBack(&pq.Match, pq.Cost) {
			open |= 1 << i
		}
	}
	if open == 0 {
		return c.decideOp(ctx, q, d)
	}
	unpin, err := c.pinTime(ctx, q)
	if err != nil {
		return err
	}
	defer unpin()
	if err := c.decideOp(ctx, q, d); err != nil || !d.Allowed {
		return err
	}
	var began [][]int64
	for i := range q.Paths {
		if open&(1<<i) == 0 {
			continue
		}
		pq := &q.Paths[i]
		if !givesBack(&pq.Match, pq.Cost) {
			continue // the policy changed between the match and the decision
		}
		tag, _ := matchTag(&pq.Match)
		e := estimate{paths: [][]string{pq.Path}, exact: []bool{true}, costs: []int64{pq.Cost}, since: q.Time.UnixMicro()}
		if began == nil {
			began = tatBegan(q)
		}
		if began != nil && began[i] != nil {
			// Where the n·T of every path on a shared bucket began: no later
			// than where this path's did, so it gives back no more.
			e.began = [][]int64{began[i]}
		}
		e.nonce = newNonce()
		id := e.String()
		t := ticket(id, tag)
		t.Time = q.Time
		qq := ticketQueue(pq.Path, pq.Cost, tag)
		qq.Time = q.Time
		life := minStartLife
		for _, l := range pq.Levels {
			life = max(life, l.Result.ResetAfter)
		}
		// On failure the start stands, counted, and its end gives nothing.
		_ = s.Enqueue(ctx, t, qq, id, min(life, store.MaxTicket))
	}
	return nil
}

// decideEnds decides a Check whose paths hold a stream's End (Envoy sends
// is_negative_hits when a stream ends, apply_on_stream_done), to give
// back what the same descriptors took when it began: their concurrency
// limits free Cost slots taken for no permit (algo.Concurrency: a release
// without a permit id), the earliest hold first, and their rate limits get
// back what the stream's start took, if it took it (settleOldest: the
// oldest ticket an admitted Start of the same path and cost opened, given
// back only where that start counted it; with no ticket, nothing).
//
// An End and another path with the same entries in the same query are a
// settle: the estimate taken when the stream began given back and its real
// cost (that path's Cost) charged, as one change of their difference on
// the rate limits (a reward of what the estimate took beyond the cost, or
// a penalty of the excess, past the limit if need be), so that the charge
// is neither lost nor admitted beyond the limit in between; that path is
// Settled. With no ticket (the start was denied or never decided, or
// another end took its ticket) the cost is recorded in full: what was
// used is never lost. The other paths are decided as in any Check (with
// their Starts), all or nothing among them, into d; the changes happen
// whatever that decision is. An End's Levels are those whose slots it
// released.
func (c *Checker) decideEnds(ctx context.Context, q *Query, d *Decision) error {
	// rel: every End (its slots released); pos: the paths decided; ends:
	// the ends to settle; over: the excesses of ends with no ticket.
	rel, pos, over := &Query{Op: Release, Time: q.Time}, &Query{Time: q.Time}, &Query{Time: q.Time}
	var relAt, posAt []int // the index in q of each path of rel, pos
	type end struct {
		path           []string
		estimate, cost int64
	}
	var ends []end
	for i := range q.Paths {
		if q.Paths[i].End {
			rel.Paths, relAt = append(rel.Paths, q.Paths[i]), append(relAt, i)
		}
	}
	paired := make([]bool, len(rel.Paths))
	for i := range q.Paths {
		pq := &q.Paths[i]
		pq.Settled = false
		if pq.End {
			continue
		}
		k := -1
		for r := range rel.Paths {
			if !paired[r] && slices.Equal(rel.Paths[r].Path, pq.Path) {
				k = r
				break
			}
		}
		if k < 0 || pq.Path == nil {
			pos.Paths, posAt = append(pos.Paths, *pq), append(posAt, i)
			continue
		}
		paired[k], pq.Settled = true, true
		pq.Match, pq.Levels = Match{Hits: pq.Match.Hits[:0]}, nil
		ends = append(ends, end{pq.Path, rel.Paths[k].Cost, pq.Cost})
	}
	for k := range rel.Paths {
		rel.Paths[k].End = false
		if !paired[k] && rel.Paths[k].Path != nil {
			ends = append(ends, end{rel.Paths[k].Path, rel.Paths[k].Cost, 0})
		}
	}
	// Slots are released first, so that a stream starting in the same
	// query may take one.
	var relD Decision
	err := c.decideOp(ctx, rel, &relD)
	*d = Decision{Allowed: true, Matched: true, Levels: d.Levels[:0], Summary: algo.Result{Allowed: true}}
	if err == nil && len(pos.Paths) > 0 {
		err = c.Decide(ctx, pos, d)
	}
	for _, e := range ends {
		if err != nil {
			break
		}
		var ok bool
		if ok, err = c.settleOldest(ctx, q.Time, e.path, e.estimate, e.cost); err == nil && !ok && e.cost > 0 {
			over.Paths = append(over.Paths, PathQuery{Path: e.path, Exact: true, Cost: e.cost})
		}
	}
	if err == nil {
		err = c.adjust(ctx, over, algo.Penalize)
	}
	for r, i := range relAt {
		q.Paths[i] = rel.Paths[r]
		q.Paths[i].End = true
	}
	for k, i := range posAt {
		q.Paths[i] = pos.Paths[k]
	}
	return err
}

// settleOldest settles a stream's end (an End of estimate on the exact
// path, and its real cost): it takes the oldest ticket decideStarts
// opened for that path and estimate and settles it at cost as Settle
// does (the unused part given back where the start counted it, an excess
// recorded now), and reports true. With no ticket (the start was denied,
// never decided, or its ticket has ended) it reports false and changes
// nothing: the caller records the cost in full (an end that took another
// stream's ticket leaves that stream's end none: its cost is recorded all
// the same, so that no use goes uncounted). t is the time of the end (the
// zero Time: the store's clock).
func (c *Checker) settleOldest(ctx context.Context, t time.Time, path []string, estimate, cost int64) (bool, error) {
	s, ok := c.Store.(store.TicketQueue)
	if !ok || estimate < 1 || path == nil {
		return false, nil
	}
	pq := PathQuery{Path: path, Exact: true}
	if err := c.match(c.Policy.Load(), &pq, t); err != nil {
		return false, err
	}
	if !givesBack(&pq.Match, estimate) {
		return false, nil // no start there opened a ticket
	}
	tag, _ := matchTag(&pq.Match)
	qq := ticketQueue(path, estimate, tag)
	qq.Time = t
	id, err := s.Dequeue(ctx, qq)
	if err != nil || id == "" {
		return false, err
	}
	return c.settleTicket(ctx, t, id, []PathQuery{{Cost: cost}})
}

// givesBack reports whether a matched path's cost could be given back on
// one of its levels: a limit that counts both ways (not a gate, not
// concurrency slots), without debt (whose charges are recorded whether
// admitted or not: a start there is not told from a charge).
func givesBack(m *Match, cost int64) bool {
	for h := range m.Hits {
		hit := &m.Hits[h]
		for j := range hit.plans {
			p := &hit.plans[j]
			if p.Kind() != algo.KindConcurrency && !p.Debt() && p.ValidateAdjust(algo.Reward, cost) == nil {
				return true
			}
		}
	}
	return false
}

// ticketQueue is the store's queue of the tickets of a path's starts at
// cost: named by a hash of the path and the cost, placed with the path's
// own level as its tickets are (matchTag).
func ticketQueue(path []string, cost int64, tag string) store.Request {
	raw, _ := json.Marshal(path)
	sum := sha256.Sum256(append(raw, strconv.FormatInt(cost, 10)...))
	return store.Request{Key: tag + "#starts:" + hex.EncodeToString(sum[:16]), Tag: tag}
}

// minStartLife is the least a start's ticket lives: a stream that ends in
// a later window than its start still finds it (and gives back nothing
// there), since an end that finds none is charged its cost in full.
const minStartLife = time.Hour
