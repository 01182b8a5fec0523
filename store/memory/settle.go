package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

var _ store.TicketQueue = (*Store)(nil)

// tickets are the tickets issued and not settled, by their tag (the key
// they are placed with): when each expires, in µs. A tag holds at most
// store.MaxOpenTickets; the tags are as many as the keys that hold them.
type tickets struct {
	mu     sync.Mutex
	byTag  map[string]map[string]int64
	latest int64 // the latest time Issue or Settle saw: the sweep's now
	// queues are the ticket queues (Enqueue) by tag and name, each in
	// the order its entries expire: no more than its tag's tickets.
	queues map[[2]string][]queued
}

// queued is an entry of a ticket queue, and when it expires (µs).
type queued struct {
	entry  string
	expire int64
}

// Issue implements store.Settler. A tag that holds store.MaxOpenTickets
// tickets drops its expired ones, and if none has, Issue fails with
// store.ErrTooManyTickets: one tag's tickets never stop another's.
func (s *Store) Issue(_ context.Context, t store.Request, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	now := s.at(t.Time)
	tk := &s.tickets
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.issue(t, now, ttl)
}

// issue keeps t's ticket, under tk.mu.
func (tk *tickets) issue(t store.Request, now int64, ttl time.Duration) error {
	tk.latest = max(tk.latest, now)
	if tk.byTag == nil {
		tk.byTag = map[string]map[string]int64{}
	}
	g := tk.byTag[t.Tag]
	if g == nil {
		g = map[string]int64{}
		tk.byTag[t.Tag] = g
	}
	if _, held := g[t.Key]; !held && len(g) >= store.MaxOpenTickets {
		for k, e := range g {
			if e <= now {
				delete(g, k)
			}
		}
		if len(g) >= store.MaxOpenTickets {
			return fmt.Errorf("memory store: %w", store.ErrTooManyTickets)
		}
	}
	g[t.Key] = now + ttl.Microseconds()
	return nil
}

// Enqueue implements store.TicketQueue: the ticket and the entry are kept
// under one lock.
func (s *Store) Enqueue(_ context.Context, t, q store.Request, entry string, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	if err := store.ValidateQueue(q, entry, true); err != nil {
		return err
	}
	if q.Tag != t.Tag {
		return fmt.Errorf("memory store: %w: a queue placed apart from its ticket", store.ErrBadRequest)
	}
	now := s.at(t.Time)
	tk := &s.tickets
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if err := tk.issue(t, now, ttl); err != nil {
		return err
	}
	if tk.queues == nil {
		tk.queues = map[[2]string][]queued{}
	}
	name := [2]string{q.Tag, q.Key}
	e := queued{entry: entry, expire: now + ttl.Microseconds()}
	es := tk.queues[name]
	i, _ := slices.BinarySearchFunc(es, e.expire+1, func(a queued, t int64) int { return cmp.Compare(a.expire, t) })
	tk.queues[name] = slices.Insert(es, i, e)
	return nil
}

// Dequeue implements store.TicketQueue.
func (s *Store) Dequeue(_ context.Context, q store.Request) (string, error) {
	if err := store.ValidateQueue(q, "", false); err != nil {
		return "", err
	}
	now := s.at(q.Time)
	tk := &s.tickets
	tk.mu.Lock()
	defer tk.mu.Unlock()
	name := [2]string{q.Tag, q.Key}
	es := tk.queues[name]
	i := 0
	for i < len(es) && es[i].expire <= now {
		i++
	}
	entry := ""
	if i < len(es) {
		entry = es[i].entry
		i++
	}
	if es = es[i:]; len(es) == 0 {
		delete(tk.queues, name)
	} else {
		tk.queues[name] = es
	}
	return entry, nil
}

// sweep drops the expired tickets, judged against the latest time a
// ticket was issued or settled at, and the tags left with none.
func (tk *tickets) sweep() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	for tag, g := range tk.byTag {
		for k, e := range g {
			if e <= tk.latest {
				delete(g, k)
			}
		}
		if len(g) == 0 {
			delete(tk.byTag, tag)
		}
	}
	for name, es := range tk.queues {
		i := 0
		for i < len(es) && es[i].expire <= tk.latest {
			i++
		}
		if i == len(es) {
			delete(tk.queues, name)
		} else if i > 0 {
			tk.queues[name] = slices.Clone(es[i:])
		}
	}
}

// Settle implements store.Settler. The ticket is taken under its lock, so
// that it is settled once; each key then changes under its own (a
// decision on several of them in between may see some changed, not all).
func (s *Store) Settle(_ context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	if err := store.ValidateTicket(t, store.MinTicket); err != nil {
		return false, err
	}
	for i := range reqs {
		r := &reqs[i]
		if err := store.Validate(r.Key, r.Tag, r.Plan, r.Cost, r.Time); err != nil {
			return false, fmt.Errorf("request %d: %w", i, err)
		}
		if err := r.Plan.ValidateAdjust(op, r.Cost); err != nil {
			return false, fmt.Errorf("request %d: %w", i, err)
		}
		if op == algo.Reward && r.Time.IsZero() {
			return false, fmt.Errorf("request %d: %w: a give-back without the time its estimate was counted at", i, store.ErrBadRequest)
		}
	}
	now := s.at(t.Time)
	tk := &s.tickets
	tk.mu.Lock()
	tk.latest = max(tk.latest, now)
	g := tk.byTag[t.Tag]
	e, ok := g[t.Key]
	delete(g, t.Key)
	if ok && len(g) == 0 {
		delete(tk.byTag, t.Tag)
	}
	tk.mu.Unlock()
	if !ok || e <= now {
		return false, nil
	}
	for _, r := range reqs {
		since := r.Time.UnixMicro()
		r.Time = time.UnixMicro(now)
		f := func(p *algo.Plan, st *algo.State, at int64) error { return p.Adjust(st, at, op, r.Cost) }
		if op == algo.Reward {
			f = func(p *algo.Plan, st *algo.State, at int64) error { return p.GiveBack(st, at, since, r.Cost) }
		}
		if err := s.change(r, f); err != nil {
			return true, err
		}
	}
	return true, nil
}
