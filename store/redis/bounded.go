package redis

// Calls outside decisions (queues, pings, adjustments, resets, the clock,
// the over-limit cache's and the leases' upkeep) go through bounded, so
// that they return by their context whatever rueidis does; a decision's
// own calls run on goroutines of their own (coalesce.go; detached, lease.go).

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/store"
)

// clientOrErr returns the client for a call outside decisions, bounded by
// its context (see bounded), or store.ErrNotConnected while a store opened
// with Options.Background has not connected.
func (s *Store) clientOrErr() (rueidis.Client, error) {
	c := s.client()
	if c == nil {
		return nil, store.ErrNotConnected
	}
	return bounded{c}, nil
}

// boundedCall returns ctx bounded by the store's timeout (connected) and the
// client for a call outside decisions, which returns by that deadline
// whatever a stalled Redis does (clientOrErr).
func (s *Store) boundedCall(ctx context.Context) (context.Context, context.CancelFunc, rueidis.Client, error) {
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return ctx, func() {}, nil, err
	}
	c, err := s.clientOrErr()
	if err != nil {
		cancel()
		return ctx, func() {}, nil, err
	}
	return ctx, cancel, c, nil
}

// bounded is a client whose calls return by their context's deadline
// whatever rueidis does: against a Redis that has stopped answering, a
// connection it dials anew waits for its handshake up to the dial timeout
// (seconds), whatever the context says. The call goes on, on its own
// goroutine, until rueidis gives up; only its caller stops waiting.
type bounded struct{ rueidis.Client }

func (b bounded) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if ctx.Done() == nil {
		return b.Client.Do(ctx, cmd)
	}
	ch := make(chan rueidis.RedisResult, 1)
	go func() { ch <- b.Client.Do(ctx, cmd) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return rueidis.NewErrorResult(fmt.Errorf("redis store: %w", ctx.Err()))
	}
}

func (b bounded) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	if ctx.Done() == nil {
		return b.Client.DoMulti(ctx, cmds...)
	}
	ch := make(chan []rueidis.RedisResult, 1)
	go func() { ch <- b.Client.DoMulti(ctx, cmds...) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = rueidis.NewErrorResult(fmt.Errorf("redis store: %w", ctx.Err()))
		}
		return out
	}
}

// Nodes returns the nodes' clients, each bounded too: a Lua ExecMulti
// loads its script on every node through them.
func (b bounded) Nodes() map[string]rueidis.Client {
	nodes := make(map[string]rueidis.Client)
	for addr, n := range b.Client.Nodes() {
		nodes[addr] = bounded{n}
	}
	return nodes
}
