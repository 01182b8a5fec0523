// Package overlimit is an exact over-limit cache: it remembers the
// denials a shared store (Redis) gave, and repeats them without asking
// the store again while they still stand.
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
// (Forget; the Redis store does so within its ForgetPoll).
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
package overlimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

const numShards = 64

// Cache is an over-limit cache, safe for concurrent use. The zero Cache is
// not usable; call New.
type Cache struct {
	perShard int
	seed     maphash.Seed
	shards   [numShards]shard
	entries  atomic.Int64
	hits     atomic.Int64
	epoch    atomic.Uint64 // bumped by Forget and Clear
}

type shard struct {
	mu sync.Mutex
	m  map[string]entry
}

type entry struct {
	plan     algo.Plan
	cost     int64
	at, end  int64 // on the Time's clock, ns
	explicit bool
	res      algo.Result
}

// New returns a cache that holds at most about maxEntries denials (at
// least one per shard of 64).
func New(maxEntries int) *Cache {
	c := &Cache{perShard: max(1, (maxEntries+numShards-1)/numShards), seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]entry)
	}
	return c
}

// Time is a point on the cache's clock.
type Time struct {
	ns       int64
	explicit bool
}

var start = time.Now()

// Now returns the cache's time of a decision at t: t itself when it is not
// zero (a request's own Time), else the local monotonic clock now.
func Now(t time.Time) Time {
	if !t.IsZero() {
		return Time{ns: t.UnixNano(), explicit: true}
	}
	return Time{ns: int64(time.Since(start))}
}

// Epoch returns a value that changes whenever the cache forgets: read it
// before asking the store, and pass it to Remember, which then ignores a
// denial the store gave before a reset or a refund that it may not have
// seen.
func (c *Cache) Epoch() uint64 { return c.epoch.Load() }

func (c *Cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%numShards]
}

// Lookup returns the cached denial of cost on key by the limit p at now,
// aged to now, if there is one that holds: remembered for the same limit,
// for a cost no larger, on the same kind of clock, and now lies in
// [its time, its time + RetryAfter). A peek (cost 0) never hits.
func (c *Cache) Lookup(key string, p *algo.Plan, cost int64, now Time) (algo.Result, bool) {
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

// Answered counts a decision the cache answered (Stats.Hits), once
// however many of its levels Lookup found.
func (c *Cache) Answered() { c.hits.Add(1) }

// Remember caches res, the store's denial of cost on key by the limit p
// decided at at (taken before the call to the store), unless it cannot be
// cached: allowed, Never, a limit whose denials do not hold, or the cache
// forgot something since epoch was read.
func (c *Cache) Remember(key string, p *algo.Plan, cost int64, at Time, epoch uint64, res algo.Result) {
	if res.Allowed || res.RetryAfter <= 0 || cost <= 0 || !p.DenialStands() {
		return
	}
	e := entry{plan: *p, cost: cost, at: at.ns, end: at.ns + int64(res.RetryAfter), explicit: at.explicit, res: res}
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
func (sh *shard) evict(now Time) {
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
func (c *Cache) Admitted(key string) {
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
func (c *Cache) Forget(key string) {
	c.epoch.Add(1)
	c.Admitted(key)
}

// Clear drops every denial (a policy reload).
func (c *Cache) Clear() {
	c.epoch.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.entries.Add(-int64(len(sh.m)))
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// Stats are a cache's counters.
type Stats = store.OverLimitStats

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats { return Stats{Entries: c.entries.Load(), Hits: c.hits.Load()} }
