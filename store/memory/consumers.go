package memory

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

var _ store.ConsumerLog = (*Store)(nil)

// maxConsumerLists bounds the keys that have a consumers list: beyond it,
// expired lists are swept to make room, and entries for new keys are
// dropped.
const maxConsumerLists = 100_000

// consumerLists keeps a ring of entries per key.
type consumerLists struct {
	mu    sync.Mutex
	lists map[string]*ring
}

type ring struct {
	entries [][]byte // oldest first once full: next is the slot to write
	next    int
	n       int
	expires time.Time
}

// PushConsumers implements store.ConsumerLog. Tags are ignored.
func (s *Store) PushConsumers(_ context.Context, entries []store.Consumed, max int, ttl time.Duration) error {
	if max <= 0 {
		return nil
	}
	c := &s.consumers
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = map[string]*ring{}
	}
	for _, it := range entries {
		l := c.lists[it.Key]
		if l != nil && (now.After(l.expires) || len(l.entries) != max) {
			delete(c.lists, it.Key)
			l = nil
		}
		if l == nil {
			if len(c.lists) >= maxConsumerLists {
				for k, v := range c.lists {
					if now.After(v.expires) {
						delete(c.lists, k)
					}
				}
				if len(c.lists) >= maxConsumerLists {
					continue
				}
			}
			l = &ring{entries: make([][]byte, max)}
			c.lists[it.Key] = l
		}
		l.entries[l.next] = it.Entry
		l.next = (l.next + 1) % max
		l.n = min(l.n+1, max)
		l.expires = now.Add(ttl)
	}
	return nil
}

// Consumers implements store.ConsumerLog.
func (s *Store) Consumers(_ context.Context, key, _ string) ([][]byte, error) {
	c := &s.consumers
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lists[key]
	if l == nil || time.Now().After(l.expires) {
		return [][]byte{}, nil
	}
	out := make([][]byte, 0, l.n)
	for i := 1; i <= l.n; i++ {
		out = append(out, l.entries[(l.next-i+len(l.entries))%len(l.entries)])
	}
	return out, nil
}
