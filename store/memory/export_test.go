package memory

import (
	"time"

	"github.com/sluicehq/sluice/queue/backend"
)

// For the tests of package memory_test: how many keys the store holds, a
// sweep on demand, and the consumers lists' byte bound.
var WithConsumerBytes = withConsumerBytes

func (s *Store) Len() int { return s.keys() }

func (s *Store) Sweep() { s.sweep() }

// SetDedupWindow sets how long a queue remembers a handled dedup id.
func SetDedupWindow(q backend.Queue, d time.Duration) { q.(*queue).dedupWindow = d }
