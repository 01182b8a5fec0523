package memory

import (
	"context"
	"hash/maphash"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

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
