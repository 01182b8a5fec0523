package memory

import (
	"context"
	"hash/maphash"
	"time"

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
