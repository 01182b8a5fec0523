package memory

import (
	"time"

	"github.com/sluicehq/sluice/queue/backend"
)

// For the tests of package memory_test: how many keys the store holds, a
// sweep on demand, and the consumers lists' byte bound.
func WithConsumerBytes(n int) Option {
	return func(s *Store) { s.consumers.budget = n }
}

// Len returns the number of keys the store holds, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.index.Load().n
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) Sweep() { s.sweep() }

// SetDedupWindow sets how long a queue remembers a handled dedup id.
func SetDedupWindow(q backend.Queue, d time.Duration) { q.(*queue).dedupWindow = d }
