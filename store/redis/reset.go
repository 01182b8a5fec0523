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
// Cluster slots may be reset together.
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
// own, in one pipelined round trip (so keys of several Cluster slots may
// go together); op names the operation in an error.
func (s *Store) deleteEach(ctx context.Context, op string, reqs []store.Request, name func(store.Request) string) error {
	if len(reqs) == 0 {
		return nil
	}
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	c := s.client()
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

var (
	_ store.Refunder = (*Store)(nil)
	_ store.Clock    = (*Store)(nil)
)

// Refund implements store.Refunder: refund.lua on the request's level,
// at req.Time or Redis TIME.
func (s *Store) Refund(ctx context.Context, req store.Request) error {
	p, err := validateOne(&req)
	if err != nil {
		return err
	}
	if _, err := p.TAT(); err != nil {
		return fmt.Errorf("redis store: refund: %w", err)
	}
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	b := bindings[p.Kind()]
	args := []string{""}
	if !req.Time.IsZero() {
		args[0] = itoa(req.Time.UnixMicro())
	}
	args = append(appendLevel(args, b, req), "0") // a value: the level is refunded
	keys := []string{s.stateKey(req)}
	if err := refundDriver.script(1<<p.Kind()).Exec(ctx, s.client(), keys, args).Error(); err != nil {
		return fmt.Errorf("redis store: refund: %w", err)
	}
	return s.forget(ctx, req)
}
