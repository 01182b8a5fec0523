package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

func (l *Limiter) adjuster() (store.Adjuster, error) {
	a, ok := l.st.(store.Adjuster)
	if !ok {
		return nil, fmt.Errorf("sluice: %T cannot change keys outside a request", l.st)
	}
	return a, nil
}

// Penalize consumes n more units of key's limit outside a request, past
// the limit if need be (algo.Penalize): a failed login that costs more.
// For every algorithm but gate and concurrency (those: an error wrapping
// algo.ErrNotAdjustable); n is 1 to algo.MaxCount.
func (l *Limiter) Penalize(ctx context.Context, key string, n int64) error {
	a, err := l.adjuster()
	if err != nil {
		return err
	}
	return a.Adjust(ctx, store.Request{Key: key, Plan: l.plan, Cost: n}, algo.Penalize)
}

// Reward gives n units of key's limit back outside a request, never more
// than it consumed (algo.Reward): a good login that earns one back. For
// the limits Penalize takes.
func (l *Limiter) Reward(ctx context.Context, key string, n int64) error {
	a, err := l.adjuster()
	if err != nil {
		return err
	}
	return a.Adjust(ctx, store.Request{Key: key, Plan: l.plan, Cost: n}, algo.Reward)
}

// Block blocks key for d from now, whatever its block was, for a limit
// with a block (algo.Blocking; others: an error wrapping algo.ErrNoBlock).
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) error {
	a, err := l.adjuster()
	if err != nil {
		return err
	}
	return a.Block(ctx, store.Request{Key: key, Plan: l.plan}, d)
}

// Unblock ends key's block and forgets its count, for a limit with a
// block.
func (l *Limiter) Unblock(ctx context.Context, key string) error {
	a, err := l.adjuster()
	if err != nil {
		return err
	}
	return a.Unblock(ctx, store.Request{Key: key, Plan: l.plan})
}
