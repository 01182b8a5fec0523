package peers

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// BenchmarkCallShape measures what a call costs before any work: methods
// with the signatures of memory.Store.Decide, memory.Store.AllowN and
// go-limiter's Take that return at once, called the way BenchmarkPeers
// calls the real ones. Go keeps a struct of more than four fields in
// memory: a Request argument and a Result are stored and copied, and the
// copies read 16 bytes that were written 8 at a time, which the CPU cannot
// forward from its store buffer. decide-inlined is the shape of
// memory.Store.Decide itself: a method small enough to be inlined, which
// hands the request's fields on in registers; the Result's copy stays.
//
//	go test -run '^$' -bench CallShape ./peers     (from bench/)
func BenchmarkCallShape(b *testing.B) {
	ctx := context.Background()
	var e empty
	b.Run("decide", func(b *testing.B) {
		run(b, func(key string) bool {
			r, err := e.Decide(ctx, sluice.Request{Key: key, Limit: algo.GCRA{Burst: burst, Count: count, Period: period}, Cost: 1})
			return err == nil && r.Allowed
		})
	})
	b.Run("decide-inlined", func(b *testing.B) {
		run(b, func(key string) bool {
			r, err := e.DecideInlined(ctx, sluice.Request{Key: key, Limit: algo.GCRA{Burst: burst, Count: count, Period: period}, Cost: 1})
			return err == nil && r.Allowed
		})
	})
	b.Run("allow", func(b *testing.B) {
		run(b, func(key string) bool {
			ok, err := e.AllowN(ctx, key, algo.GCRA{Burst: burst, Count: count, Period: period}, 1)
			return err == nil && ok
		})
	})
	b.Run("take", func(b *testing.B) {
		run(b, func(key string) bool {
			_, _, _, ok, err := e.Take(ctx, key)
			return ok && err == nil
		})
	})
}

type empty struct{}

//go:noinline
func (empty) Decide(_ context.Context, req sluice.Request) (algo.Result, error) {
	return algo.Result{Allowed: req.Cost == 1}, nil
}

func (e empty) DecideInlined(_ context.Context, req sluice.Request) (algo.Result, error) {
	return e.decide(req.Key, req.Limit, req.Cost, req.Time, req.Tag)
}

//go:noinline
func (empty) decide(_ string, _ algo.Limit, cost int64, _ time.Time, _ string) (algo.Result, error) {
	return algo.Result{Allowed: cost == 1}, nil
}

//go:noinline
func (empty) AllowN(_ context.Context, key string, _ algo.Limit, n int64) (bool, error) {
	return n == 1 && key != "", nil
}

//go:noinline
func (empty) Take(_ context.Context, key string) (uint64, uint64, uint64, bool, error) {
	return 1, 1, 1, key != "", nil
}
