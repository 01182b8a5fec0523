package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// Validate checks what a store decides before it decides it: a key of 1 to
// MaxKeyLen bytes, a tag that is a prefix of it, a plan, a cost of 0 to
// the plan's MaxCost, and a time (when set) within 1970..2255. Its errors
// wrap ErrBadRequest. It takes the parts one by one, so that a store's
// entry point that has them in registers (memory.Store.AllowN) keeps them
// there; nothing escapes.
func Validate(key, tag string, p *algo.Plan, cost int64, t time.Time) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrBadRequest)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrBadRequest, len(key), MaxKeyLen)
	case cost < 0:
		return fmt.Errorf("%w: negative cost %d", ErrBadRequest, cost)
	case cost > algo.MaxCount:
		return fmt.Errorf("%w: cost %d exceeds %d (algo.MaxCount)", ErrBadRequest, cost, algo.MaxCount)
	case p == nil || p.MaxCost() == 0:
		return fmt.Errorf("%w: no plan (algo.Compile a limit)", ErrBadRequest)
	case cost > p.MaxCost():
		return fmt.Errorf("%w: cost %d exceeds %d, the most one %s decision takes (an exact log writes an entry per action: set buckets)", ErrBadRequest, cost, p.MaxCost(), p.Kind())
	case !strings.HasPrefix(key, tag):
		// Copies of the strings go into the error, so that a request's
		// key and tag do not escape for the sake of an error.
		return fmt.Errorf("%w: tag %q is not a prefix of key %q", ErrBadRequest, strings.Clone(tag), strings.Clone(key))
	}
	if !t.IsZero() {
		if us := t.UnixMicro(); us < 0 || us > algo.MaxTime {
			return fmt.Errorf("%w: time %s is outside 1970..2255", ErrBadRequest, t.UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// ValidateAll checks the requests of a DecideAll as Check does, and that all
// share the first one's Time and that there is one result per request.
func ValidateAll(reqs []Request, results []algo.Result) error {
	switch {
	case len(reqs) == 0:
		return fmt.Errorf("%w: no requests", ErrBadRequest)
	case len(results) != len(reqs):
		return fmt.Errorf("%w: %d results for %d requests", ErrBadRequest, len(results), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if err := Validate(r.Key, r.Tag, r.Plan, r.Cost, r.Time); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if !r.Time.Equal(reqs[0].Time) {
			return fmt.Errorf("%w: request %d has another time than request 0", ErrBadRequest, i)
		}
		if r.Stop && !r.Plan.Debt() {
			return fmt.Errorf("%w: request %d: Stop is for a plan with a debt", ErrBadRequest, i)
		}
		if r.Watch != 0 || r.WatchDenials {
			if err := validateWatch(r, len(reqs)-1-i); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
	}
	return nil
}

// ValidateHolders checks r as Check does for a HolderLister, whose plan must
// be a concurrency limit's (else an error wrapping algo.ErrUnsupported),
// and returns that limit.
func ValidateHolders(r *Request) (algo.Concurrency, error) {
	if err := Validate(r.Key, r.Tag, r.Plan, r.Cost, r.Time); err != nil {
		return algo.Concurrency{}, err
	}
	c, ok := r.Plan.Concurrency()
	if !ok {
		return c, fmt.Errorf("store: holders: %w: %v has no holders (only a concurrency limit does)", algo.ErrUnsupported, r.Plan.Kind())
	}
	return c, nil
}

// validateWatch checks a request that watches others (Request.Watch),
// after which are n requests.
func validateWatch(r *Request, n int) error {
	_, blocks := r.Plan.Blocks()
	switch {
	case r.Watch < 1 || r.Watch > n:
		return fmt.Errorf("%w: it watches %d requests, and %d follow it", ErrBadRequest, r.Watch, n)
	case r.Plan.Kind() != algo.KindFixedWindow || !blocks || r.Plan.Debt():
		return fmt.Errorf("%w: a request that watches others needs a fixed window with a block, got %v", ErrBadRequest, r.Plan.Kind())
	case r.Cost != 0:
		return fmt.Errorf("%w: a request that watches others has cost 0 (each event costs 1), got %d", ErrBadRequest, r.Cost)
	}
	return nil
}
