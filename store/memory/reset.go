package memory

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Reset forgets the state of each request's Key, as if the key had never
// been seen; the other fields are ignored. Unknown keys are no error.
func (s *Store) Reset(_ context.Context, reqs []store.Request) error {
	for _, r := range reqs {
		h := maphash.String(s.seed, r.Key)
		sh := &s.shards[h&(shardCount-1)]
		sh.mu.Lock()
		x := sh.index.Load()
		if e := x.find(h, r.Key); e != nil {
			e.mu.Lock()
			e.dead = true
			e.mu.Unlock()
			x.remove(e)
		}
		sh.mu.Unlock()
	}
	return nil
}

var (
	_ store.Refunder = (*Store)(nil)
	_ store.Clock    = (*Store)(nil)
)

// Now implements store.Clock: the store's monotonic clock, which its
// decisions without a time use.
func (s *Store) Now(context.Context) (time.Time, error) { return time.UnixMicro(s.now()), nil }

// Refund implements store.Refunder.
func (s *Store) Refund(_ context.Context, req store.Request) error {
	if err := store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
		return err
	}
	p := req.Plan
	if _, err := p.TAT(); err != nil {
		return err
	}
	t := s.now()
	if !req.Time.IsZero() {
		t = req.Time.UnixMicro()
	}
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index.Load().find(h, req.Key)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st.Expire > t && e.st.Shape == p.Shape() {
		return p.Undo(&e.st, t, req.Cost)
	}
	return nil
}

var _ store.HolderLister = (*Store)(nil)

// Holders implements store.HolderLister.
func (s *Store) Holders(_ context.Context, req store.Request) ([]algo.Holder, error) {
	c, err := store.ValidateHolders(&req)
	if err != nil {
		return nil, err
	}
	t := s.at(req.Time)
	h := maphash.String(s.seed, req.Key)
	e := s.shards[h&(shardCount-1)].index.Load().find(h, req.Key)
	if e == nil {
		return nil, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || e.st.Expire <= t || e.st.Shape != req.Plan.Shape() {
		return nil, nil
	}
	return c.Holders(&e.st, t), nil
}

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
