package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

var _ store.Settler = (*Store)(nil)

// maxTickets bounds the tickets a store keeps: Issue refuses more.
const maxTickets = 1 << 20

// tickets are the tickets issued and not settled: when each expires, in µs.
type tickets struct {
	mu   sync.Mutex
	live map[string]int64
}

// Issue implements store.Settler. The store keeps at most 1,048,576
// tickets; when it holds that many, expired ones are dropped, and if none
// has, Issue fails.
func (s *Store) Issue(_ context.Context, t store.Request, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	now := s.at(t.Time)
	tk := &s.tickets
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.live == nil {
		tk.live = map[string]int64{}
	}
	if len(tk.live) >= maxTickets {
		for k, e := range tk.live {
			if e <= now {
				delete(tk.live, k)
			}
		}
		if len(tk.live) >= maxTickets {
			return fmt.Errorf("memory store: %d tickets open, the most it keeps", maxTickets)
		}
	}
	tk.live[t.Key] = now + algo.Micros(ttl)
	return nil
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
	}
	now := s.at(t.Time)
	tk := &s.tickets
	tk.mu.Lock()
	e, ok := tk.live[t.Key]
	delete(tk.live, t.Key)
	tk.mu.Unlock()
	if !ok || e <= now {
		return false, nil
	}
	for _, r := range reqs {
		r.Time = time.UnixMicro(now)
		if err := s.change(r, func(p *algo.Plan, st *algo.State, at int64) error { return p.Adjust(st, at, op, r.Cost) }); err != nil {
			return true, err
		}
	}
	return true, nil
}
