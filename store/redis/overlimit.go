package redis

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
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
	now, epoch := cacheNow(reqs[0].Time), s.denials.Epoch()
	// A level whose denials record (a uniform sliding log) must see the
	// attempt even when another level denies it: such a decision goes to
	// Redis.
	// So must a decision that a level counts the denials of (a node's
	// escalate of denials), and one with a global limit, whose share a
	// refill may grow at any moment (global.go).
	cacheable := true
	for i := range reqs {
		cacheable = cacheable && reqs[i].Plan.DenialStands() && !reqs[i].WatchDenials && !reqs[i].Global
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

// denialCache is the exact over-limit cache: it remembers the denials
// Redis gave, and repeats them without asking again while they still
// stand.
//
// A denial of cost c at time t with RetryAfter R, by a limit whose denials
// stand (algo.Plan.DenialStands: every algorithm but a nary or uniform
// sliding log), means that the state did not change and that until t+R
// the cost c, and any larger cost, is denied again whatever else is
// decided meanwhile: only time frees capacity, and other decisions, here
// or on any other client of the store, only take it. So a cached denial
// never denies what the store would admit; it can only be too early to
// lift, never too late, when the store's state is changed by a refund or
// a reset on another client until that client's store tells this one
// (Forget; the store does so within its ForgetPoll).
//
// For the cost that was denied the cached answer is the store's own
// (RetryAfter and ResetAfter aged by the time since), as long as nothing
// else on this client admitted on the key: an admission forgets the key.
// Remaining is the store's at the denial, a lower bound: a window may have
// freed some since without freeing enough (a sliding log denied by its
// minimum gap).
// For a larger cost, and when other clients take capacity meanwhile, the
// RetryAfter it gives is a lower bound of the store's.
//
// Times are taken on the local monotonic clock before the call to the
// store, so a denial expires no later than it does in the store, whatever
// the two clocks read; a request with its own Time uses that time instead
// (a replay), and its denials are looked up only by requests that also
// carry times, at or after the denial's.
//
// It is safe for concurrent use; make one with newDenialCache.
type denialCache struct {
	perShard int
	seed     maphash.Seed
	shards   [denialShards]denialShard
	entries  atomic.Int64
	hits     atomic.Int64
	epoch    atomic.Uint64 // bumped by Forget and Clear
}

const denialShards = 64

type denialShard struct {
	mu sync.Mutex
	m  map[string]denial
}

// denial is a cached denial of cost by plan, decided at at.
type denial struct {
	plan     algo.Plan
	cost     int64
	at, end  int64 // on the cacheTime's clock, ns
	explicit bool
	res      algo.Result
}

// newDenialCache returns a cache that holds at most about maxEntries
// denials (at least one per shard of 64).
func newDenialCache(maxEntries int) *denialCache {
	c := &denialCache{perShard: max(1, (maxEntries+denialShards-1)/denialShards), seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denial)
	}
	return c
}

// cacheTime is a point on the cache's clock.
type cacheTime struct {
	ns       int64
	explicit bool
}

var cacheStart = time.Now()

// cacheNow returns the cache's time of a decision at t: t itself when it
// is not zero (a request's own Time), else the local monotonic clock now.
func cacheNow(t time.Time) cacheTime {
	if !t.IsZero() {
		return cacheTime{ns: t.UnixNano(), explicit: true}
	}
	return cacheTime{ns: int64(time.Since(cacheStart))}
}

// Epoch returns a value that changes whenever the cache forgets: read it
// before asking the store, and pass it to Remember, which then ignores a
// denial the store gave before a reset or a refund that it may not have
// seen.
func (c *denialCache) Epoch() uint64 { return c.epoch.Load() }

func (c *denialCache) shard(key string) *denialShard {
	return &c.shards[maphash.String(c.seed, key)%denialShards]
}

// Lookup returns the cached denial of cost on key by the limit p at now,
// aged to now, if there is one that holds: remembered for the same limit,
// for a cost no larger, on the same kind of clock, and now lies in
// [its time, its time + RetryAfter). A peek (cost 0) never hits.
func (c *denialCache) Lookup(key string, p *algo.Plan, cost int64, now cacheTime) (algo.Result, bool) {
	if cost <= 0 || c.entries.Load() == 0 {
		return algo.Result{}, false
	}
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok || e.explicit != now.explicit || now.ns < e.at || now.ns >= e.end || cost < e.cost || !e.plan.Equal(p) {
		return algo.Result{}, false
	}
	elapsed := time.Duration(now.ns - e.at)
	r := e.res
	r.RetryAfter -= elapsed
	r.ResetAfter = max(r.ResetAfter-elapsed, r.RetryAfter)
	return r, true
}

// Answered counts a decision the cache answered (Stats' Hits), once
// however many of its levels Lookup found.
func (c *denialCache) Answered() { c.hits.Add(1) }

// Remember caches res, the store's denial of cost on key by the limit p
// decided at at (taken before the call to the store), unless it cannot be
// cached: allowed, Never, a limit whose denials do not hold, or the cache
// forgot something since epoch was read.
func (c *denialCache) Remember(key string, p *algo.Plan, cost int64, at cacheTime, epoch uint64, res algo.Result) {
	if res.Allowed || res.RetryAfter <= 0 || cost <= 0 || !p.DenialStands() {
		return
	}
	e := denial{plan: *p, cost: cost, at: at.ns, end: at.ns + int64(res.RetryAfter), explicit: at.explicit, res: res}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.epoch.Load() != epoch {
		return
	}
	if _, ok := sh.m[key]; !ok {
		if len(sh.m) >= c.perShard {
			sh.evict(at)
			c.entries.Add(-1)
		}
		c.entries.Add(1)
	}
	sh.m[key] = e
}

// evict removes an entry of a full shard: an expired one among the first
// few it looks at, else the first of those.
func (sh *denialShard) evict(now cacheTime) {
	victim, n := "", 0
	for k, e := range sh.m {
		if e.explicit == now.explicit && now.ns >= e.end {
			victim = k
			break
		}
		if n == 0 {
			victim = k
		}
		if n++; n == 8 {
			break
		}
	}
	delete(sh.m, victim)
}

// Admitted tells the cache that the store admitted a cost on key: a
// denial cached for it no longer describes the state exactly (it still
// holds), so it is dropped.
func (c *denialCache) Admitted(key string) {
	if c.entries.Load() == 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		c.entries.Add(-1)
	}
	sh.mu.Unlock()
}

// Forget drops key's denials, for a reset or a refund that gives capacity
// back; a denial being decided meanwhile is not remembered (see Epoch).
func (c *denialCache) Forget(key string) {
	c.epoch.Add(1)
	c.Admitted(key)
}

// Clear drops every denial (a policy reload).
func (c *denialCache) Clear() {
	c.epoch.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.entries.Add(-int64(len(sh.m)))
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// Stats returns the cache's counters.
func (c *denialCache) Stats() store.OverLimitStats {
	return store.OverLimitStats{Entries: c.entries.Load(), Hits: c.hits.Load()}
}
