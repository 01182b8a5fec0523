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

// Store is the in-memory store. Its zero value is not usable; call New.
type Store struct {
	seed       maphash.Seed
	shards     [shardCount]shard
	clock      func() time.Time
	stop       chan struct{}
	done       chan struct{}
	once       sync.Once
	sweepEvery time.Duration
	consumers  consumerLists
}

type shard struct {
	mu sync.Mutex
	m  map[string]*algo.State
	// latest is the latest decision time (µs) the shard has seen. The
	// sweeper judges expiry against latest plus the wall time elapsed since
	// it first saw that value (sweptLatest at sweptWall), so that callers
	// that pass their own (possibly virtual) times keep their state, and a
	// decision with its own time reads no clock.
	latest                 int64
	sweptLatest, sweptWall int64
	_                      [128 - 40]byte // one shard per pair of cache lines
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
	s := &Store{seed: maphash.MakeSeed(), clock: time.Now, stop: make(chan struct{}), done: make(chan struct{})}
	s.sweepEvery = 10 * time.Second
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*algo.State)
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
func (s *Store) Decide(_ context.Context, req sluice.Request) (algo.Result, error) {
	if err := req.Validate(); err != nil {
		return algo.Result{}, err
	}
	var t int64
	if req.Time.IsZero() {
		t = s.clock().UnixMicro()
	} else {
		t = req.Time.UnixMicro()
	}
	sh := &s.shards[maphash.String(s.seed, req.Key)&(shardCount-1)]
	sh.mu.Lock()
	if t > sh.latest {
		sh.latest = t
	}
	st := sh.m[req.Key]
	var r algo.Result
	if st == nil {
		var fresh algo.State
		r = req.Limit.Decide(&fresh, t, req.Cost, true)
		if fresh.Expire > t {
			sh.m[req.Key] = &fresh
		}
	} else {
		if st.Expire <= t {
			*st = algo.State{Log: st.Log[:0]} // keep the log's capacity
		}
		r = req.Limit.Decide(st, t, req.Cost, true)
	}
	sh.mu.Unlock()
	return r, nil
}

// Len returns the number of keys the store holds, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep forgets every key whose state has expired, judged in each shard
// against the latest decision time it has seen plus the wall time elapsed
// since a sweep first saw that time (so at most one sweep interval late).
// The background sweeper calls it; tests may too.
func (s *Store) Sweep() {
	wall := s.clock().UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.latest != sh.sweptLatest {
			sh.sweptLatest, sh.sweptWall = sh.latest, wall
		}
		now := sh.latest + max(wall-sh.sweptWall, 0)
		for k, st := range sh.m {
			if st.Expire <= now {
				delete(sh.m, k)
			}
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
	if err := sluice.ValidateAll(reqs, results); err != nil {
		return false, err
	}
	var t int64
	if reqs[0].Time.IsZero() {
		t = s.clock().UnixMicro()
	} else {
		t = reqs[0].Time.UnixMicro()
	}
	// Small batches (every policy path in practice) keep their working
	// slices on the stack.
	const small = 8
	var idxBuf [small]int
	var stBuf [small]*algo.State
	var limBuf [small]algo.Limit
	idx, states, limits := idxBuf[:0], stBuf[:0], limBuf[:0]
	if len(reqs) > small {
		idx, states, limits = make([]int, 0, len(reqs)), make([]*algo.State, 0, len(reqs)), make([]algo.Limit, 0, len(reqs))
	}
	idx, states, limits = idx[:len(reqs)], states[:len(reqs)], limits[:len(reqs)]
	var locked uint64 // bit i: shard i
	for i, r := range reqs {
		idx[i] = int(maphash.String(s.seed, r.Key) & (shardCount - 1))
		locked |= 1 << idx[i]
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

	for i, r := range reqs {
		limits[i] = r.Limit
		if len(reqs) > 1 {
			limits[i], _ = algo.InBatch(r.Limit) // a nary log is all or nothing here
		}
	}
	pass := true
	for i, r := range reqs {
		st := s.shards[idx[i]].m[r.Key]
		if st == nil {
			st = new(algo.State)
		} else if st.Expire <= t {
			*st = algo.State{Log: st.Log[:0]}
		}
		states[i] = st
		results[i] = limits[i].Decide(st, t, r.Cost, false)
		if !results[i].Allowed && !r.Shadow {
			pass = false
		}
	}
	for i, r := range reqs {
		switch {
		case pass || !results[i].Allowed:
			// Record the cost, or let the algorithm record a denied attempt.
			results[i] = limits[i].Decide(states[i], t, r.Cost, true)
		default:
			results[i] = limits[i].Decide(states[i], t, 0, false)
		}
		if sh := &s.shards[idx[i]]; states[i].Expire > t && sh.m[r.Key] == nil {
			sh.m[r.Key] = states[i]
		}
	}
	return pass, nil
}
