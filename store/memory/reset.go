package memory

import (
	"context"
	"hash/maphash"

	"github.com/sluicehq/sluice"
)

// Reset forgets the state of each request's Key, as if the key had never
// been seen; the other fields are ignored. Unknown keys are no error.
func (s *Store) Reset(_ context.Context, reqs []sluice.Request) error {
	for _, r := range reqs {
		sh := &s.shards[maphash.String(s.seed, r.Key)&(shardCount-1)]
		sh.mu.Lock()
		delete(sh.m, r.Key)
		sh.mu.Unlock()
	}
	return nil
}
