package memory

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

var _ store.Adjuster = (*Store)(nil)

// Adjust implements store.Adjuster.
func (s *Store) Adjust(_ context.Context, req store.Request, op algo.Adjust) error {
	return s.change(req, func(p *algo.Plan, st *algo.State, t int64) error { return p.Adjust(st, t, op, req.Cost) })
}

// Block implements store.Adjuster.
func (s *Store) Block(_ context.Context, req store.Request, d time.Duration) error {
	return s.change(req, func(p *algo.Plan, st *algo.State, t int64) error { return p.BlockFor(st, t, d) })
}

// Unblock implements store.Adjuster.
func (s *Store) Unblock(_ context.Context, req store.Request) error {
	return s.change(req, func(p *algo.Plan, st *algo.State, t int64) error { return p.Unblock(st) })
}

// change applies f to the state of req's key at req.Time (the store's
// clock when zero), under the key's lock, adding the key if it is new and
// its state outlives the time.
func (s *Store) change(req store.Request, f func(p *algo.Plan, st *algo.State, t int64) error) error {
	if err := store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
		return err
	}
	p := req.Plan
	t := s.at(req.Time)
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.see(t)
	e := sh.index.Load().find(h, req.Key)
	fresh := e == nil
	if fresh {
		e = newEntry(h, req.Key, algo.State{})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.Refresh(p.Shape(), t)
	if err := f(p, &e.st, t); err != nil {
		return err
	}
	if fresh && e.st.Live(t) {
		sh.add(e)
	}
	return nil
}
