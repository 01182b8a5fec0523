package redis

import (
	"context"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis/internal/overlimit"
)

var _ store.DenialCache = (*Store)(nil)

// decideCached is DecideAll with the over-limit cache (Options.OverLimitCache):
// when an enforced request has a cached denial, and no request's limit
// records denials (a nary or uniform sliding log, which must see the
// attempt), the decision is denied without a round trip. The requests with one report it, aged; the others
// were not read and report only that they were not the reason: allowed,
// with their quota as both Quota and Remaining. Otherwise the store
// decides, and its denials are remembered. The requests are compiled
// (Store.compile).
func (s *Store) decideCached(ctx context.Context, reqs []store.Request, results []algo.Result) (bool, error) {
	now, epoch := overlimit.Now(reqs[0].Time), s.denials.Epoch()
	// A level whose denials record (a uniform sliding log) must see the
	// attempt even when another level denies it: such a decision goes to
	// Redis.
	// So must a decision that a level counts the denials of (a node's
	// escalate of denials).
	cacheable := true
	for i := range reqs {
		cacheable = cacheable && reqs[i].Plan.DenialStands() && !reqs[i].WatchDenials
	}
	hit := false
	for i := range reqs {
		if !cacheable || reqs[i].Shadow {
			continue
		}
		res, ok := s.denials.Lookup(reqs[i].Key, reqs[i].Plan, cachedCost(reqs[i].Cost), now)
		if ok && reqs[i].Cost == 0 && res.DeniedBy != algo.DeniedByBlock {
			res, ok = algo.Result{}, false // a peek passes all but a block
		}
		results[i] = res // a miss: the zero Result
		hit = hit || ok
	}
	if hit {
		s.denials.Answered()
		for i := range reqs {
			if reqs[i].Shadow || results[i].RetryAfter == 0 { // not a cached denial
				q, _ := algo.Quota(reqs[i].Plan.Limit())
				results[i] = algo.Result{Allowed: true, Quota: q, Remaining: q}
			}
		}
		return false, nil
	}
	pass, err := s.decideAll(ctx, reqs, results)
	if err != nil {
		return false, err
	}
	for i, r := range reqs {
		switch {
		case r.Shadow:
		case pass && r.Cost > 0:
			s.denials.Admitted(r.Key)
		case !results[i].Allowed && (r.Cost > 0 || results[i].DeniedBy == algo.DeniedByBlock):
			s.denials.Remember(r.Key, reqs[i].Plan, cachedCost(r.Cost), now, epoch, results[i])
		}
	}
	return pass, nil
}

// OverLimitStats implements store.DenialCache (zero when the cache is off).
func (s *Store) OverLimitStats() store.OverLimitStats {
	if s.denials == nil {
		return store.OverLimitStats{}
	}
	return s.denials.Stats()
}

// ClearOverLimit implements store.DenialCache.
func (s *Store) ClearOverLimit() {
	if s.denials != nil {
		s.denials.Clear()
	}
}

// cachedCost is the cost a request is cached and looked up at: its own, or
// 1 for a peek, which only a block's denial (that holds for any cost)
// answers: a node's escalate peeks at its block.
func cachedCost(cost int64) int64 { return max(cost, 1) }
