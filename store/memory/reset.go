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

var _ store.Clock = (*Store)(nil)

// Now implements store.Clock: the store's monotonic clock, which its
// decisions without a time use.
func (s *Store) Now(context.Context) (time.Time, error) { return time.UnixMicro(s.now()), nil }
