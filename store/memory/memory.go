// Package memory is Sluice's embedded store: state lives in this process,
// one entry per key with a lock of its own, found through 64 shards' hash
// indexes that decisions read without locking, so decisions on different
// keys do not wait for each other. A decision on an existing key allocates
// nothing. Expired state is swept in the background, so memory stays
// bounded by the keys that are live.
package memory

import (
	"cmp"
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

const (
	shardBits  = 6
	shardCount = 1 << shardBits
)

// Store is the in-memory store. Its zero value is not usable; call New.
type Store struct {
	seed   maphash.Seed
	shards [shardCount]shard
	// base is when New ran, with its monotonic reading, and baseUS its
	// wall clock in µs: the store's clock is baseUS plus the monotonic
	// time since (see now).
	base       time.Time
	baseUS     int64
	stop       chan struct{}
	done       chan struct{}
	once       sync.Once
	sweepEvery time.Duration
	consumers  consumerLists
	queues     queues
	tickets    tickets
	board      board
}

// A shard holds the keys whose hash ends in its number. Decisions on a
// key it holds find the entry without its lock; it is taken to add keys,
// sweep, and for DecideAll.
type shard struct {
	mu    sync.Mutex
	index atomic.Pointer[index]
	// latest is about the latest decision time (µs) the shard has seen,
	// moved on at most once a millisecond (see see). The sweeper judges
	// expiry against latest plus the wall time elapsed since it first saw
	// that value (sweptLatest at sweptWall), so that callers that pass
	// their own (possibly virtual) times keep their state, and a decision
	// with its own time reads no clock.
	latest                 atomic.Int64
	sweptLatest, sweptWall int64          // under mu
	_                      [128 - 40]byte // one shard per pair of cache lines
}

// seeEvery is how far a decision's time must pass a shard's latest to
// move it: the sweeper may then judge expiry up to this late, and a shard
// in steady use is written once a millisecond, not on every decision.
const seeEvery = 1000

func (sh *shard) see(t int64) {
	if t > sh.latest.Load()+seeEvery {
		sh.latest.Store(t)
	}
}

// Option configures a Store.
type Option func(*Store)

// WithSweepEvery sets how often expired state is swept (default 10s). A
// zero or negative interval disables the background sweeper.
func WithSweepEvery(d time.Duration) Option {
	return func(s *Store) { s.sweepEvery = d }
}

// New returns an empty store. Close stops its sweeper.
func New(opts ...Option) *Store {
	base := time.Now()
	s := &Store{seed: maphash.MakeSeed(), base: base, baseUS: base.UnixMicro(), stop: make(chan struct{}), done: make(chan struct{})}
	s.sweepEvery = 10 * time.Second
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].index.Store(newIndex(minCells))
	}
	if s.sweepEvery > 0 {
		go s.sweeper(s.sweepEvery)
	} else {
		close(s.done)
	}
	return s
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Resetter = (*Store)(nil)
)

func init() {
	store.Register("memory", func(context.Context, string, store.Options) (store.Store, error) { return New(), nil })
}

// Decide implements store.Store.
//
// The request does not escape, and a decision on an existing key
// allocates nothing. It takes no lock but the key's own, and holds it only
// while the algorithm reads and writes the state (algo.Plan.DecideUnlock).
func (s *Store) Decide(_ context.Context, req store.Request) (r algo.Result, err error) {
	// The fields go one by one: a Request is too large for registers.
	if !plain(req.Key, req.Plan, req.Cost, req.Time) || req.Tag != "" {
		if err = store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
			return
		}
	}
	s.apply(req.Key, req.Plan, req.Time, req.Cost, &r)
	return r, nil
}

var _ store.Allower = (*Store)(nil)

// AllowN implements store.Allower: it decides as Decide does; with r nil
// it reports only whether the cost was admitted, which for GCRA, the token
// bucket, the fixed window and the gate spares computing the rest of the
// Result.
func (s *Store) AllowN(_ context.Context, key string, p *algo.Plan, t time.Time, n int64, r *algo.Result) (bool, error) {
	if !plain(key, p, n, t) {
		if err := store.Validate(key, "", p, n, t); err != nil {
			return false, err
		}
	}
	return s.apply(key, p, t, n, r), nil
}

// plain reports whether a request is the common one that store.Validate
// accepts, checked inline: a key of 1 to store.MaxKeyLen bytes, the
// store's clock, a cost of 1 to the plan's MaxCost (0 for no plan). For
// any other, Validate decides.
func plain(key string, p *algo.Plan, cost int64, t time.Time) bool {
	return uint(len(key)-1) < store.MaxKeyLen && t.IsZero() && p != nil && uint64(cost-1) < uint64(p.MaxCost())
}

// at is a request's time in µs: t, or the store's clock when t is zero.
func (s *Store) at(t time.Time) int64 {
	if t.IsZero() {
		return s.now()
	}
	return t.UnixMicro()
}

// apply decides a checked request with plan p at when (the store's
// clock when zero), sets *r to its Result unless r is nil, and reports
// whether it was allowed.
func (s *Store) apply(key string, p *algo.Plan, when time.Time, cost int64, r *algo.Result) bool {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	e := sh.index.Load().find(h, key)
	// The clock is read once the key is found: the CPU reads it while
	// the entry's lock comes from memory.
	t := s.at(when)
	sh.see(t)
	if e != nil {
		e.mu.Lock()
		if !e.dead {
			refresh(&e.st, p, t)
			return p.DecideUnlock(&e.st, t, cost, &e.mu, r)
		}
		e.mu.Unlock()
	}
	// A new key, or one swept or reset since it was found: look again
	// under the shard's lock, which adding and removing keys take.
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.index.Load().find(h, key); e != nil {
		e.mu.Lock() // under the shard's lock, an indexed entry is live
		refresh(&e.st, p, t)
		return p.DecideUnlock(&e.st, t, cost, &e.mu, r)
	}
	// A key not held: decide on a fresh state, and keep it only if it
	// outlives t (a peek or a denial stores nothing).
	fresh := algo.State{Shape: p.Shape()}
	ok := p.DecideUnlock(&fresh, t, cost, nil, r)
	if fresh.Live(t) {
		sh.add(newEntry(h, key, fresh))
	}
	return ok
}

// refresh forgets st when it has expired at t or holds another layout
// than p's.
func refresh(st *algo.State, p *algo.Plan, t int64) {
	if st.Expire <= t || st.Shape != p.Shape() {
		st.Refresh(p.Shape(), t)
	}
}

// add indexes e, whose key the shard does not hold, growing the index
// when it would be more than half full. The caller holds sh.mu.
func (sh *shard) add(e *entry) {
	x := sh.index.Load()
	if 2*(x.n+1) > len(x.cells) {
		x = x.resized(2 * len(x.cells))
		sh.index.Store(x)
	}
	x.add(e)
}

// now is the store's clock in µs since the epoch: the wall clock at New
// plus the monotonic time elapsed since (time.Since reads the kernel's
// monotonic clock), so that it does not go back when the wall clock is
// set back, nor between goroutines on different CPUs.
func (s *Store) now() int64 { return s.baseUS + int64(time.Since(s.base))/1000 }

// sweep forgets every key whose state has expired, judged in each shard
// against the latest decision time it has seen plus the wall time elapsed
// since a sweep first saw that time (so at most one sweep interval late),
// and shrinks the index of a shard whose keys fell to an eighth of its
// size, so that memory follows the live keys, not their peak. The
// background sweeper calls it; tests may too.
func (s *Store) sweep() {
	wall := s.now()
	var dead []*entry
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if l := sh.latest.Load(); l != sh.sweptLatest {
			sh.sweptLatest, sh.sweptWall = l, wall
		}
		now := sh.sweptLatest + max(wall-sh.sweptWall, 0)
		x := sh.index.Load()
		dead = dead[:0]
		for j := range x.cells {
			if e := x.cells[j].Load(); e != nil {
				e.mu.Lock()
				if !e.st.Live(now) {
					e.dead = true
					dead = append(dead, e)
				}
				e.mu.Unlock()
			}
		}
		if live := x.n - len(dead); len(x.cells) > minCells && 8*live <= len(x.cells) {
			sh.index.Store(x.resized(cellsFor(live)))
		} else {
			for _, e := range dead {
				x.remove(e)
			}
		}
		sh.mu.Unlock()
	}
	s.tickets.sweep()
}

func (s *Store) sweeper(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// Close stops the sweeper and releases the store's queues. The store must
// not be used afterwards.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.closeQueues()
	})
	<-s.done
	return nil
}

// DecideAll implements store.Store. It checks every request, and records
// the costs only if every request that is not Shadow passes; a denied
// request may still record its attempt (a uniform sliding log). In a batch
// of several requests a nary sliding log acts as binary (algo.InBatch); a
// batch of one is Decide.
//
// When the store holds every key, it locks their entries alone. Otherwise
// it locks every shard the requests touch (in shard order, so concurrent
// batches cannot deadlock), then the entries, and adds the new keys. Both
// ways lock entries in the order of their addresses, so a batch holding
// some entries never waits for one that waits for them.
func (s *Store) DecideAll(ctx context.Context, reqs []store.Request, results []algo.Result) (bool, error) {
	if len(reqs) == 1 && len(results) == 1 && reqs[0].Watch == 0 && !reqs[0].WatchDenials {
		// A batch of one is Decide, which takes no shard lock.
		r, err := s.Decide(ctx, reqs[0])
		results[0] = r
		return err == nil && (r.Allowed || reqs[0].Shadow), err
	}
	// Small batches (every policy path in practice) keep their working
	// slices on the stack.
	const small = 8
	var hashBuf [small]uint64
	var entBuf, heldBuf [small]*entry
	var planBuf [small]*algo.Plan
	hs, ents, held, plans := hashBuf[:0], entBuf[:0], heldBuf[:0], planBuf[:0]
	if len(reqs) > small {
		hs, ents, held, plans = make([]uint64, 0, len(reqs)), make([]*entry, 0, len(reqs)), make([]*entry, 0, len(reqs)), make([]*algo.Plan, 0, len(reqs))
	}
	hs, ents, plans = hs[:len(reqs)], ents[:len(reqs)], plans[:len(reqs)]
	// Each request's plan to apply in a batch (a nary log is all or
	// nothing, a copy; the others are the request's own).
	if err := store.ValidateAll(reqs, results); err != nil {
		return false, err
	}
	for i := range reqs {
		plans[i] = algo.InBatch(reqs[i].Plan)
	}
	t := s.at(reqs[0].Time)
	var locked uint64 // bit i: shard i
	for i, r := range reqs {
		hs[i] = maphash.String(s.seed, r.Key)
		locked |= 1 << (hs[i] & (shardCount - 1))
		s.shards[hs[i]&(shardCount-1)].see(t)
	}

	// Every key held: lock the entries alone, unless one of them was swept
	// or reset meanwhile.
	if found, ok := s.findAll(reqs, hs, ents, held); ok {
		lockAll(found)
		if !slices.ContainsFunc(found, func(e *entry) bool { return e.dead }) {
			pass := decideAll(reqs, results, plans, ents, t)
			unlockAll(found)
			return pass, nil
		}
		unlockAll(found)
	}

	for i := range s.shards {
		if locked&(1<<i) != 0 {
			s.shards[i].mu.Lock()
		}
	}
	defer func() {
		for i := range s.shards {
			if locked&(1<<i) != 0 {
				s.shards[i].mu.Unlock()
			}
		}
	}()
	// With the shards locked, indexed entries are live. A key not indexed
	// gets an entry of its own, shared by its repeats in the batch, locked
	// like the others (once added below, a Decide may find it before the
	// batch is done with it), and added only if its state outlives t.
	held = held[:0]
	for i, r := range reqs {
		ents[i] = s.shards[hs[i]&(shardCount-1)].index.Load().find(hs[i], r.Key)
		if ents[i] == nil {
			for j := range i {
				if ents[j].h == hs[i] && ents[j].key == r.Key {
					ents[i] = ents[j]
				}
			}
		}
		if ents[i] == nil {
			ents[i] = newEntry(hs[i], r.Key, algo.State{})
		}
		if !slices.Contains(held, ents[i]) {
			held = append(held, ents[i])
		}
	}
	lockAll(held)
	defer unlockAll(held)
	pass := decideAll(reqs, results, plans, ents, t)
	for _, e := range held {
		if sh := &s.shards[e.h&(shardCount-1)]; e.st.Live(t) && sh.index.Load().find(e.h, e.key) == nil {
			sh.add(e)
		}
	}
	return pass, nil
}

// findAll sets ents[i] to the entry of reqs[i], found without locks, and
// returns the distinct entries appended to held; false when a key is not
// held.
func (s *Store) findAll(reqs []store.Request, hs []uint64, ents, held []*entry) ([]*entry, bool) {
	for i, r := range reqs {
		e := s.shards[hs[i]&(shardCount-1)].index.Load().find(hs[i], r.Key)
		if e == nil {
			return held, false
		}
		ents[i] = e
		if !slices.Contains(held, e) {
			held = append(held, e)
		}
	}
	return held, true
}

// lockAll locks the entries in the order of their addresses.
func lockAll(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
	for _, e := range es {
		e.mu.Lock()
	}
}

func unlockAll(es []*entry) {
	for _, e := range es {
		e.mu.Unlock()
	}
}

// decideAll applies a batch to the entries, whose locks the caller holds:
// every request is checked, then every cost recorded if all that are not
// Shadow pass; else a denied request may record its attempt, and the
// others report their state. A request that watches others
// (store.Request.Watch) is decided last, at cost 1 per event of those it
// watches, the deepest first, so that one watching it sees its block.
//
// A request with a debt is decided in this check, in its order, and its
// cost recorded whatever the others decide (a key twice in the batch
// answers each with the count after its own cost), unless it Stops:
// then it records an admitted cost only when every request (Shadow ones
// too) is allowed, decided again after those before it.
func decideAll(reqs []store.Request, results []algo.Result, plans []*algo.Plan, ents []*entry, t int64) bool {
	pass, all, watching := true, true, false
	for i, r := range reqs {
		st := &ents[i].st
		refresh(st, plans[i], t)
		if plans[i].Debt() && !r.Stop {
			results[i] = plans[i].Decide(st, t, r.Cost, true)
		} else {
			results[i].Allowed = plans[i].Allows(st, t, r.Cost) // the loop below makes every Result
		}
		if !results[i].Allowed {
			all = false
			pass = pass && r.Shadow
		}
		watching = watching || r.Watch > 0
	}
	again := true  // no Stop request decided again is denied
	var ev []uint8 // with watchers: per request, evDenied, evBlocked
	if watching {
		ev = make([]uint8, len(reqs))
	}
	for i, r := range reqs {
		if r.Watch > 0 {
			continue
		}
		st := &ents[i].st
		before := st.Block.Blocked(t)
		switch {
		case plans[i].Debt() && !r.Stop:
			// Decided in the check.
		case r.Stop && (all || !results[i].Allowed):
			results[i] = plans[i].Decide(st, t, r.Cost, true)
			again = again && (results[i].Allowed || r.Shadow)
		case r.Stop:
			// Stopped: what it reports, after the requests before it
			// (the same key, over).
			if results[i] = plans[i].Decide(st, t, r.Cost, false); results[i].Allowed {
				results[i] = plans[i].Decide(st, t, 0, false)
			} else {
				results[i].Remaining = 0
				again = again && r.Shadow
			}
		case pass || !results[i].Allowed:
			// Record the cost, or let the algorithm record a denied
			// attempt or a debt.
			results[i] = plans[i].Decide(st, t, r.Cost, true)
		default:
			results[i] = plans[i].Decide(st, t, 0, false)
		}
		if ev != nil {
			ev[i] = events(r, results[i], before, st.Block.Blocked(t))
		}
	}
	for i := len(reqs) - 1; i >= 0 && watching; i-- {
		r := reqs[i]
		if r.Watch == 0 {
			continue
		}
		st := &ents[i].st
		before := st.Block.Blocked(t)
		n := 0
		for _, e := range ev[i+1 : i+1+r.Watch] {
			if e&evBlocked != 0 || r.WatchDenials && e&evDenied != 0 {
				n++
			}
		}
		for ; n > 0 && !st.Block.Blocked(t); n-- {
			plans[i].Decide(st, t, 1, true)
		}
		results[i] = plans[i].Decide(st, t, 0, false) // as a peek, or the block's denial
		ev[i] = events(r, results[i], before, st.Block.Blocked(t))
	}
	return pass && again
}

// What a request of a batch did, for one that watches it.
const (
	evDenied  = 1 << iota // it denied
	evBlocked             // its denial started a block
)

// events returns what an enforced request did, given its result and
// whether its key was blocked before and after.
func events(r store.Request, res algo.Result, before, after bool) uint8 {
	switch {
	case r.Shadow || res.Allowed:
		return 0
	case !before && after:
		return evDenied | evBlocked
	}
	return evDenied
}
