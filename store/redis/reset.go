package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// Reset forgets the state of each request's Key, placed by its Tag and
// named for its Limit's shape as a decision would (a request without a
// Limit names a GCRA or token bucket's key), and its block, as if the key
// had never been seen; Cost and Time are ignored. Unknown keys are no error. Each key is
// deleted on its own (in one pipelined round trip), so keys of several
// Cluster hash slots may be reset together.
func (s *Store) Reset(ctx context.Context, reqs []store.Request) error {
	if len(reqs) == 0 {
		return nil
	}
	if err := s.deleteEach(ctx, "reset", reqs, s.stateKey); err != nil {
		return err
	}
	// And each key's block (a limit with one, algo.Blocking): a reset key
	// is one never seen.
	if err := s.deleteEach(ctx, "reset", reqs, func(r store.Request) string { return blockKey(s.stateKey(r)) }); err != nil {
		return err
	}
	return s.forget(ctx, reqs...)
}

// deleteEach deletes the key name gives each request, each key on its
// own, in one pipelined round trip (so keys of several Cluster hash slots may
// go together); op names the operation in an error.
func (s *Store) deleteEach(ctx context.Context, op string, reqs []store.Request, name func(store.Request) string) error {
	if len(reqs) == 0 {
		return nil
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	cmds := make(rueidis.Commands, len(reqs))
	for i, r := range reqs {
		cmds[i] = c.B().Del().Key(name(r)).Build()
	}
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("redis store: %s: %w", op, err)
		}
	}
	return nil
}

var _ store.Clock = (*Store)(nil)
