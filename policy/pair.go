package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Envoy's protocol carries no id from a stream's start to its end: the
// end gives back the estimate of the same descriptor with
// is_negative_hits. DecideStarts and SettleOldest pair them through the
// store (store.TicketQueue): an admitted start opens a ticket in the queue
// of its path and cost, and an end takes the oldest, so that nothing is
// given back that no start took, and only where that start counted it.

// DecideStarts decides q as Decide does; when it is admitted, each path i
// of starts (bit i) whose cost is 1 or more on a level that gives back (a
// limit that counts both ways, without debt) opens a ticket of the
// estimate it took, queued by its path and cost, for as long as a give-back
// could still find it counted (its levels' ResetAfter) and at least an hour
// (minStartLife), which SettleOldest takes. Such a query is decided at an explicit time (q.Time,
// or the store's clock), which the ticket names. A ticket that cannot be
// kept (the key holds store.MaxOpenTickets, the store failed) leaves the
// start admitted and counted, with nothing to give back. A query with no
// such path, or a store without ticket queues, costs what Decide does.
func (c *Checker) DecideStarts(ctx context.Context, q *Query, d *Decision, starts uint64) error {
	s, ok := c.Store.(store.TicketQueue)
	if starts == 0 || !ok {
		return c.Decide(ctx, q, d)
	}
	p := c.Policy.Load()
	open := uint64(0)
	for i := range q.Paths {
		pq := &q.Paths[i]
		if i >= 64 || starts&(1<<i) == 0 || pq.Cost < 1 || pq.Path == nil {
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
		return c.Decide(ctx, q, d)
	}
	if q.Time.IsZero() {
		now, err := storeNow(ctx, c.Store)
		if err != nil {
			return err
		}
		q.Time = now
		defer func() { q.Time = time.Time{} }()
	}
	if err := c.Decide(ctx, q, d); err != nil || !d.Allowed {
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
		var random [16]byte
		rand.Read(random[:])
		e.nonce = base64.RawURLEncoding.EncodeToString(random[:])
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

// SettleOldest settles a stream's end (Envoy's is_negative_hits of
// estimate on the exact path, and its real cost): it takes the oldest
// ticket DecideStarts opened for that path and estimate and settles it at
// cost as Settle does (the unused part given back where the start counted
// it, an excess recorded now), and reports true. With no ticket (the start
// was denied, never decided, or its ticket has ended) it reports false and
// changes nothing: the caller records the cost in full (an end that took
// another stream's ticket leaves that stream's end none: its cost is
// recorded all the same, so that no use goes uncounted).
// t is the time of the end (the zero Time: the store's clock).
func (c *Checker) SettleOldest(ctx context.Context, t time.Time, path []string, estimate, cost int64) (bool, error) {
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
	return c.Settle(ctx, t, id, cost)
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

// storeNow is the store's clock (store.Clock), or this process's.
func storeNow(ctx context.Context, st store.Store) (time.Time, error) {
	if clock, ok := st.(store.Clock); ok {
		return clock.Now(ctx)
	}
	return time.Now(), nil
}
