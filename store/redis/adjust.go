package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

var _ store.Adjuster = (*Store)(nil)

var adjustScript = embeddedScript("expire.lua", "window_counter.lua", "sliding_log.lua", "change.lua", "adjust.lua")

// Adjust implements store.Adjuster: scripts/change.lua on the key's
// state, by the rules of algo.Plan.Adjust.
func (s *Store) Adjust(ctx context.Context, req store.Request, op algo.Adjust) error {
	code, args, err := adjustArgs(&req, op)
	if err != nil {
		return err
	}
	return s.adjust(ctx, req, code, args)
}

// adjustArgs validates a penalty or reward of req.Cost on req's key and
// returns change.lua's op and arguments for it.
func adjustArgs(req *store.Request, op algo.Adjust) (string, []string, error) {
	p, err := validateOne(req)
	if err != nil {
		return "", nil, err
	}
	if err := p.ValidateAdjust(op, req.Cost); err != nil {
		return "", nil, err
	}
	letter := "t"
	var args []string
	switch p.Kind() {
	case algo.KindGCRA, algo.KindTokenBucket:
		t, _ := p.TAT()
		args = []string{itoa(req.Cost), itoa(t.Interval), itoa(algo.MaxHorizon.Microseconds())}
	case algo.KindWindowCounter:
		letter = "w"
		args = windowCounterArgs(nil, limitOf[algo.WindowCounter](p), req.Cost)
	case algo.KindSlidingLog:
		letter = "s"
		args = slidingLogArgs(nil, limitOf[algo.SlidingLog](p), req.Cost)
	default: // a fixed window: the last kind Adjust allows
		letter = "f"
		fw := limitOf[algo.FixedWindow](p)
		args = calendarWindows([]string{itoa(req.Cost), itoa(fw.Window.Microseconds()), itoa(algo.MaxCount)}, p, req.Time)
	}
	if op == algo.Reward {
		return letter + "r", args, nil
	}
	return letter + "p", args, nil
}

// Block implements store.Adjuster.
func (s *Store) Block(ctx context.Context, req store.Request, d time.Duration) error {
	p, err := validateOne(&req)
	if err != nil {
		return err
	}
	if err := p.ValidateBlock(d); err != nil {
		return err
	}
	b, _ := p.Blocks()
	return s.adjust(ctx, req, "b", []string{itoa(d.Microseconds()), itoa(b.WithDefaults().ForgetAfter.Microseconds())})
}

// Unblock implements store.Adjuster.
func (s *Store) Unblock(ctx context.Context, req store.Request) error {
	p, err := validateOne(&req)
	if err != nil {
		return err
	}
	if err := p.Unblock(new(algo.State)); err != nil { // only says whether there is a block
		return err
	}
	return s.adjust(ctx, req, "u", nil)
}

// validateOne validates one request and returns its plan.
func validateOne(req *store.Request) (*algo.Plan, error) {
	if err := store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
		return nil, err
	}
	return req.Plan, nil
}

// adjust runs adjust.lua on the request's key and block key, then drops
// the key's cached denials here and on the other stores.
func (s *Store) adjust(ctx context.Context, req store.Request, op string, args []string) error {
	ctx, cancel, c, err := s.boundedCall(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	key := s.stateKey(req)
	if op == "b" || op == "u" {
		key = blockKey(key)
	}
	now := ""
	if !req.Time.IsZero() {
		now = itoa(req.Time.UnixMicro())
	}
	if err := adjustScript.Exec(ctx, c, []string{key}, append([]string{now, op}, args...)).Error(); err != nil {
		return fmt.Errorf("redis store: %s: %w", op, err)
	}
	return s.forget(ctx, req)
}
