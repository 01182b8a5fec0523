// Package memory is Sluice's embedded store: state lives in this process, in
// a sharded map whose shards each have their own lock, so decisions on
// different keys rarely contend. A decision on an existing key allocates
// nothing. Expired state is swept in the background, so memory stays bounded
// by the keys that are live.
package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

const shardCount = 64 // a power of two

// shrinkAt is the fewest keys a shard must have held before a sweep
// rebuilds its map to give memory back.
const shrinkAt = 1024

// Store is the in-memory store. Its zero value is not usable; call New.
type Store struct {
	seed   maphash.Seed
	shards [shardCount]shard
	// base is the wall clock at New, and baseUS the same in µs: the
	// store's clock is base plus the monotonic time since (see now).
	base       time.Time
	baseUS     int64
	stop       chan struct{}
	done       chan struct{}
	once       sync.Once
	sweepEvery time.Duration
	consumers  consumerLists
}

type shard struct {
	mu sync.Mutex
	m  table
	// latest is the latest decision time (µs) the shard has seen. The
	// sweeper judges expiry against latest plus the wall time elapsed since
	// it first saw that value (sweptLatest at sweptWall), so that callers
	// that pass their own (possibly virtual) times keep their state, and a
	// decision with its own time reads no clock.
	latest                 int64
	sweptLatest, sweptWall int64
	// peak is the most keys a sweep has found in the shard since its map
	// was last rebuilt (Go maps do not shrink).
	peak int
	_    [128 - 48]byte // one shard per pair of cache lines
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
	s := &Store{seed: maphash.MakeSeed(), base: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	s.baseUS = s.base.UnixMicro()
	s.sweepEvery = 10 * time.Second
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = table{}
	}
	if s.sweepEvery > 0 {
		go s.sweeper(s.sweepEvery)
	} else {
		close(s.done)
	}
	return s
}

var (
	_ sluice.Store   = (*Store)(nil)
	_ store.Resetter = (*Store)(nil)
)

func init() {
	store.Register("memory", func(context.Context, string, store.Options) (sluice.Store, error) { return New(), nil })
}

// Decide implements sluice.Store.
//
// The request does not escape: a limit value in it (an algo.GCRA, say)
// stays on the caller's stack, and a decision on an existing key
// allocates nothing.
func (s *Store) Decide(_ context.Context, req sluice.Request) (algo.Result, error) {
	var p algo.Plan
	if err := req.Compile(&p); err != nil {
		return algo.Result{}, err
	}
	var t int64
	if req.Time.IsZero() {
		t = s.now()
	} else {
		t = req.Time.UnixMicro()
	}
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	if t > sh.latest {
		sh.latest = t
	}
	st := sh.m.get(h, req.Key)
	var r algo.Result
	if st == nil {
		fresh := algo.State{Shape: p.Shape()}
		r = p.Decide(&fresh, t, req.Cost, true)
		if fresh.Expire > t {
			sh.m.put(h, req.Key, fresh)
		}
	} else {
		if st.Expire <= t || st.Shape != p.Shape() {
			*st = algo.State{Log: st.Log[:0], Shape: p.Shape()} // keep the log's capacity
		}
		r = p.Decide(st, t, req.Cost, true)
	}
	sh.mu.Unlock()
	return r, nil
}

// now is the store's clock in µs since the epoch: the wall clock at New
// plus the monotonic time elapsed since, which costs one monotonic clock
// read (time.Now reads the wall clock too, about twice the cost here), and
// never goes back when the wall clock is set back.
func (s *Store) now() int64 { return s.baseUS + int64(time.Since(s.base)/time.Microsecond) }

// Len returns the number of keys the store holds, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.m.len()
		sh.mu.Unlock()
	}
	return n
}

// Sweep forgets every key whose state has expired, judged in each shard
// against the latest decision time it has seen plus the wall time elapsed
// since a sweep first saw that time (so at most one sweep interval late),
// and rebuilds the map of a shard whose live keys fell to a quarter of the
// most it held, so that memory follows the live keys, not their peak. The
// background sweeper calls it; tests may too.
func (s *Store) Sweep() {
	wall := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.latest != sh.sweptLatest {
			sh.sweptLatest, sh.sweptWall = sh.latest, wall
		}
		now := sh.latest + max(wall-sh.sweptWall, 0)
		before := len(sh.m)
		sh.m.sweep(now)
		sh.peak = max(sh.peak, before)
		// A map keeps the memory of the most keys it ever held: once the
		// live keys fall to a quarter of that, move them to a new one.
		if sh.peak >= shrinkAt && len(sh.m) <= sh.peak/4 {
			sh.m = sh.m.clone()
			sh.peak = len(sh.m)
		}
		sh.mu.Unlock()
	}
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
			s.Sweep()
		}
	}
}

// Close stops the sweeper. The store must not be used afterwards.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// DecideAll implements sluice.Store. It locks every shard the requests
// touch (in shard order, so concurrent batches cannot deadlock), checks
// every request, and records the costs only if every request that is not
// Shadow passes; a denied request may still record its attempt (a uniform
// sliding log). In a batch of several requests a nary sliding log acts as
// binary (algo.InBatch); a batch of one is Decide.
func (s *Store) DecideAll(_ context.Context, reqs []sluice.Request, results []algo.Result) (bool, error) {
	// Small batches (every policy path in practice) keep their working
	// slices on the stack.
	const small = 8
	var hashBuf [small]uint64
	var stBuf [small]*algo.State
	var planBuf [small]algo.Plan
	hs, states, plans := hashBuf[:0], stBuf[:0], planBuf[:0]
	if len(reqs) > small {
		hs, states, plans = make([]uint64, 0, len(reqs)), make([]*algo.State, 0, len(reqs)), make([]algo.Plan, 0, len(reqs))
	}
	hs, states, plans = hs[:len(reqs)], states[:len(reqs)], plans[:len(reqs)]
	if err := sluice.PlanAll(reqs, results, plans); err != nil {
		return false, err
	}
	var t int64
	if reqs[0].Time.IsZero() {
		t = s.now()
	} else {
		t = reqs[0].Time.UnixMicro()
	}
	var locked uint64 // bit i: shard i
	for i, r := range reqs {
		hs[i] = maphash.String(s.seed, r.Key)
		locked |= 1 << (hs[i] & (shardCount - 1))
	}
	for i := range s.shards {
		if locked&(1<<i) != 0 {
			sh := &s.shards[i]
			sh.mu.Lock()
			if t > sh.latest {
				sh.latest = t
			}
		}
	}
	defer func() {
		for i := range s.shards {
			if locked&(1<<i) != 0 {
				s.shards[i].mu.Unlock()
			}
		}
	}()

	if len(reqs) > 1 {
		for i := range plans {
			plans[i].InBatch() // a nary log is all or nothing here
		}
	}
	pass := true
	for i, r := range reqs {
		st := s.shards[hs[i]&(shardCount-1)].m.get(hs[i], r.Key)
		if st == nil {
			st = &algo.State{Shape: plans[i].Shape()}
		} else if st.Expire <= t || st.Shape != plans[i].Shape() {
			*st = algo.State{Log: st.Log[:0], Shape: plans[i].Shape()}
		}
		states[i] = st
		results[i] = plans[i].Decide(st, t, r.Cost, false)
		if !results[i].Allowed && !r.Shadow {
			pass = false
		}
	}
	for i, r := range reqs {
		switch {
		case pass || !results[i].Allowed:
			// Record the cost, or let the algorithm record a denied attempt.
			results[i] = plans[i].Decide(states[i], t, r.Cost, true)
		default:
			results[i] = plans[i].Decide(states[i], t, 0, false)
		}
		if sh := &s.shards[hs[i]&(shardCount-1)]; states[i].Expire > t && sh.m.get(hs[i], r.Key) == nil {
			sh.m.put(hs[i], r.Key, *states[i])
		}
	}
	return pass, nil
}
