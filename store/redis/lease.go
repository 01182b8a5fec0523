package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Leased quota (Options.LeaseFor): for a request with Lease set on a
// fixed-window limit, a store that sees a key often takes a lease of k
// units in one lease.lua call, which counts them in the window at once,
// and admits from it locally until the lease's deadline: LeaseFor after
// it was taken, and never past the window's end. What a lease has left at
// its deadline is given back to the window (by the next lease's call, or
// by a sweep every LeaseFor/2). k follows the key's rate as this store
// sees it (the units it would admit in LeaseFor, the rate measured over
// at least LeaseFor/10; at most MaxLease), and lease.lua grants at most
// half of what the window has left divided among the stores holding
// leases in it, so that near the limit leases shrink, and below 2 units
// none is granted: the requests are decided exactly.
//
// The bounds: every unit admitted from a lease was counted in its window
// before, and is admitted before the window ends, so a window never
// admits more than its limit, whatever the number of stores (zero
// over-admission). What a window refuses that an exact limiter would
// have admitted is at most the units held, unused, in leases: at most
// MaxLease per store and key at any time, and for no longer than
// LeaseFor plus the sweep after the lease's deadline.

// This file is the one home of leases; the rest of Sluice only says where
// they apply and asks for them:
//
//   - which limits can be leased: algo.Kind.Leasable (fixed windows), the
//     one statement of the rule, which policy validation and leasable ask;
//   - where: a limits.yaml node's lease: true (policy), which sets
//     store.Request.Lease on its requests;
//   - the capabilities: store.Leaser (LeaseStats, for metrics) and
//     store.Granter (Grant: quota for a proxy, the same leases given out;
//     policy.LeaseRequests says what a proxy's quota covers);
//   - taking units ahead goes through detached, the one state machine for
//     a call whose caller may give up: leases and grants alike.
//
// A next lease-like mechanism belongs here, beside them.

// defaultMaxLease is Options.MaxLease when zero.
const defaultMaxLease = 10_000

// maxLeaseKeys bounds the keys whose rate a store follows for leases.
const maxLeaseKeys = 1 << 16

var leaseScript = embeddedScript("expire.lua", "lease.lua")

// leaser is a store's leases, by key.
type leaser struct {
	taker    string
	leaseFor time.Duration
	maxLease int64
	seed     maphash.Seed
	shards   [64]leaseShard
	stop     chan struct{}
	done     chan struct{}
}

type leaseShard struct {
	mu sync.Mutex
	m  map[string]*keyLease
}

// keyLease is what a store knows of one key: its lease, if any, and its
// rate since the last lease.
type keyLease struct {
	limit, window int64 // the fixed window the lease is of (µs)
	key, tag      string
	left          int64         // units of the lease not yet admitted
	deadline      int64         // local clock (ns): no admission at or after it
	windowEnd     int64         // local clock (ns): no later than the window's end
	end           int64         // the lease's window end (µs, Redis's clock): for a give-back
	count         int64         // the window's count after the lease was taken
	seen          int64         // decisions asked since since
	since         int64         // local clock (ns)
	size          int64         // the units a lease (or a top-up) was last asked to hold
	refused       int64         // local clock (ns): no lease call before it
	gen           uint64        // the lease's number, from 1
	busy          bool          // a lease call is in flight
	ready         chan struct{} // closed when it returns
}

var leaseEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(leaseEpoch)) }

func newLeaser(leaseFor time.Duration, maxLease int64) *leaser {
	var id [6]byte
	rand.Read(id[:])
	l := &leaser{taker: hex.EncodeToString(id[:]), leaseFor: leaseFor, maxLease: maxLease, seed: maphash.MakeSeed(),
		stop: make(chan struct{}), done: make(chan struct{})}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*keyLease)
	}
	return l
}

func (l *leaser) shard(key string) *leaseShard {
	return &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
}

// leasable reports whether a request may be admitted from a lease: it
// asks for one, is enforced, costs something, is on the store's clock,
// and its limit can be leased (algo.Kind.Leasable: a fixed window).
func leasable(r *store.Request) (algo.FixedWindow, bool) {
	if !r.Lease || r.Global || r.Shadow || r.Cost <= 0 || !r.Time.IsZero() || r.Plan == nil || !r.Plan.Kind().Leasable() {
		return algo.FixedWindow{}, false
	}
	if _, blocks := r.Plan.Blocks(); blocks || r.Plan.Debt() {
		return algo.FixedWindow{}, false // a lease would admit during a block, and hold no debt
	}
	fw := limitOf[algo.FixedWindow](r.Plan)
	if fw.Calendar != (algo.Calendar{}) {
		return algo.FixedWindow{}, false // lease.lua counts windows aligned to the epoch
	}
	return fw, true
}

// take admits cost from key's lease, if it holds that much and is live.
// It also says whether the caller should call lease.lua for the key, and
// for how many units: a new lease (none is live, and the key is hot), or a
// top-up of a live lease that fell below half its size.
//
// The clock is read under the key's lock, so that no admission from a
// lease happens later than the time its deadline was judged by; that time
// is returned, for lease.
func (l *leaser) take(r *store.Request, fw algo.FixedWindow, res *algo.Result) (kl *keyLease, gen uint64, want int64, wait <-chan struct{}, now int64) {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = monoNow()
	kl = sh.m[r.Key]
	window := fw.Window.Microseconds()
	if kl == nil || kl.limit != fw.Count || kl.window != window {
		if kl == nil && len(sh.m) >= maxLeaseKeys/len(l.shards) {
			sh.evict(now)
		}
		kl = &keyLease{limit: fw.Count, window: window, key: r.Key, tag: r.Tag, since: now}
		sh.m[r.Key] = kl
	}
	kl.seen++
	live := now < kl.deadline
	if live && kl.left >= r.Cost {
		kl.left -= r.Cost
		*res = kl.result(now, r.Cost)
		gen = kl.gen
	}
	if kl.busy {
		if gen == 0 {
			wait = kl.ready // a lease call is in flight: wait for it
		}
		return kl, gen, 0, wait, now
	}
	if live && kl.left >= kl.size/2 || now < kl.refused {
		return kl, gen, 0, nil, now
	}
	// The lease's size: the units this key would use in LeaseFor at the
	// rate seen since the last lease call (or since it was first seen),
	// over at least a tenth of LeaseFor: a key seen once leases 10 units,
	// whatever LeaseFor, and a hot key's leases grow at most tenfold a call.
	elapsed := max(now-kl.since, int64(l.leaseFor)/10, int64(time.Millisecond))
	k := (kl.seen*int64(l.leaseFor) + elapsed - 1) / elapsed
	k = min(max(k, kl.size), l.maxLease, fw.Count)
	if live {
		want = k - kl.left // a top-up, to k
	} else if k >= 2 && k >= r.Cost {
		want = k
	}
	if want > 0 {
		kl.busy, kl.ready, kl.size = true, make(chan struct{}), k
	}
	return kl, gen, want, nil, now
}

// evict drops a key with no units leased, or failing that any key (its
// units then wait for the window's end).
func (sh *leaseShard) evict(now int64) {
	for k, kl := range sh.m {
		if !kl.busy && (kl.left == 0 || now >= kl.deadline) {
			delete(sh.m, k)
			return
		}
	}
	for k := range sh.m {
		delete(sh.m, k)
		return
	}
}

// result is a decision admitted from the lease: Remaining is what the
// window had left when the lease was taken, plus the lease's own units
// left (other stores' use since is not known).
func (kl *keyLease) result(now, cost int64) algo.Result {
	return algo.Result{Allowed: true, Quota: kl.limit, Remaining: max(kl.limit-kl.count, 0) + kl.left, Admitted: cost,
		ResetAfter: time.Duration(max(kl.windowEnd-now, 0))}
}

// giveBack returns cost to key's lease gen, after the decision it was
// taken for was denied by another level. Units of a lease that has been
// replaced meanwhile are not given to the new one, which may be of
// another window: they wait for their window's end.
func (l *leaser) giveBack(key string, cost int64, gen uint64) {
	sh := l.shard(key)
	sh.mu.Lock()
	if kl := sh.m[key]; kl != nil && kl.gen == gen {
		kl.left += cost
	}
	sh.mu.Unlock()
}

// lease calls lease.lua for k more units on r's key, for kl, which take
// marked busy: a top-up of the live lease, or a new lease, which gives
// back what the last one left. With res, it admits r's cost from a new
// lease when granted (a top-up's caller was admitted by take already, or
// went on without it). A kl evicted meanwhile still gets its units, which
// then wait, unused, for the window's end.
func (s *Store) lease(ctx context.Context, kl *keyLease, r *store.Request, fw algo.FixedWindow, k int64, now int64, res *algo.Result) (uint64, error) {
	l := s.leases
	sh := l.shard(r.Key)
	sh.mu.Lock()
	topUp := now < kl.deadline
	var back, backEnd int64
	if !topUp {
		back, backEnd = kl.left, kl.end
		kl.left = 0
	}
	sh.mu.Unlock()
	least := max(2, r.Cost) // a new lease: worth a round trip, and covers r
	if topUp {
		least = 1
	}
	granted, end, count, rnow, err := s.callLease(ctx, r.Key, r.Tag, fw, k, least, back, backEnd)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	kl.busy = false
	close(kl.ready)
	if err != nil {
		return 0, err
	}
	kl.seen, kl.since = 0, now
	// The window ends end-rnow after Redis's now, which came after the
	// local now: the local deadline is no later than the window's end.
	kl.windowEnd = now + (end-rnow)*int64(time.Microsecond)
	deadline := min(kl.windowEnd, now+int64(l.leaseFor))
	if topUp && end == kl.end && now < kl.deadline {
		kl.count = count
		if granted > 0 {
			kl.left += granted
			kl.deadline = deadline
		}
		return 0, nil
	}
	// A new lease: units of the last one, if any are left, are of an
	// ended window or were given back.
	kl.gen++
	kl.end, kl.count = end, count
	kl.left, kl.deadline = granted, deadline
	if granted == 0 {
		// Refused: the window is near its limit. Decide exactly, and ask
		// again only after LeaseFor.
		kl.deadline, kl.refused = 0, now+int64(l.leaseFor)
		return 0, nil
	}
	if r.Cost > kl.left || res == nil {
		return 0, nil
	}
	kl.left -= r.Cost
	*res = kl.result(now, r.Cost)
	return kl.gen, nil
}

// callLease runs lease.lua.
func (s *Store) callLease(ctx context.Context, key, tag string, fw algo.FixedWindow, k, least, back, backEnd int64) (granted, end, count, now int64, err error) {
	if err := s.enter(ctx); err != nil {
		return 0, 0, 0, 0, err
	}
	defer s.leave()
	name := keyName(s.prefix, key, tag) + fixedWindowShape
	args := []string{"", itoa(fw.Window.Microseconds()), itoa(fw.Count), itoa(k), s.leases.taker, itoa(back), itoa(backEnd), itoa(least)}
	v, err := detached(ctx, s.timeout, func(ctx context.Context) ([]int64, error) {
		v, err := leaseScript.Exec(ctx, s.client(), []string{name}, args).AsIntSlice()
		if err == nil && len(v) != 4 {
			err = fmt.Errorf("lease replied %d values", len(v))
		}
		return v, err
	}, func(ctx context.Context, v []int64) {
		if v[1] > 0 {
			leaseScript.Exec(ctx, s.client(), []string{name}, []string{"", args[1], args[2], "0", args[4], itoa(v[1]), itoa(v[2]), "0"})
		}
	})
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("redis store: lease: %w", err)
	}
	return v[1], v[2], v[3], v[0], nil
}

// detached is the one way a store takes units ahead (a lease, a grant):
// call runs on a goroutine of its own, with a context that outlives ctx
// by up to timeout, and detached returns its result, or ctx's error by
// ctx's deadline, whatever the client does. Units that call took after
// the caller gave up are handed to giveBack, on that goroutine, so that
// no window keeps units nobody will use; a result that comes later than
// timeout is lost to its window until the window ends.
func detached[T any](ctx context.Context, timeout time.Duration, call func(context.Context) (T, error), giveBack func(context.Context, T)) (T, error) {
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	var state atomic.Int32 // 0 waiting, 1 answered, 2 given up
	go func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		v, err := call(cctx)
		if state.CompareAndSwap(0, 1) {
			ch <- reply{v, err}
		} else if err == nil {
			giveBack(cctx, v)
		}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			var zero T
			return zero, ctx.Err()
		}
		r := <-ch
		return r.v, r.err
	}
}

// decideLeased is DecideAll when leases are on and some request may be
// admitted from one: those are taken from their leases (or from a new
// lease, when their key is hot), the others are decided by the store, and
// if those deny, the units taken go back to their leases. The requests
// are compiled (Store.compile).
func (s *Store) decideLeased(ctx context.Context, reqs []store.Request, results []algo.Result) (bool, error) {
	var buf [8]uint64
	covered := buf[:0] // the lease each request was admitted from, 0 for none
	if len(reqs) <= len(buf) {
		covered = buf[:len(reqs)]
	} else {
		covered = make([]uint64, len(reqs))
	}
	n := 0
	for i := range reqs {
		fw, ok := leasable(&reqs[i])
		if !ok {
			continue
		}
		kl, gen, want, wait, now := s.leases.take(&reqs[i], fw, &results[i])
		// While another caller is taking a lease for the key, wait for it
		// (about a round trip of our own) and try again, a few times
		// (other waiters may drain it first); then decide exactly.
		for tries := 0; wait != nil && tries < 4; tries++ {
			select {
			case <-wait:
				kl, gen, want, wait, now = s.leases.take(&reqs[i], fw, &results[i])
			case <-ctx.Done():
				wait = nil
			}
		}
		switch {
		case want > 0 && gen != 0: // a top-up, in the background
			r := reqs[i]
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
				defer cancel()
				s.lease(ctx, kl, &r, fw, want, now, nil)
			}()
		case want > 0:
			var err error
			if gen, err = s.lease(ctx, kl, &reqs[i], fw, want, now, &results[i]); err != nil {
				s.returnCovered(reqs, covered)
				return false, err
			}
		}
		if gen != 0 {
			covered[i] = gen
			n++
		}
	}
	if n == len(reqs) {
		return true, nil
	}
	rest, restResults := reqs, results
	if n > 0 {
		rest, restResults = make([]store.Request, 0, len(reqs)-n), make([]algo.Result, len(reqs)-n)
		for i := range reqs {
			if covered[i] == 0 {
				rest = append(rest, reqs[i])
			}
		}
	}
	var pass bool
	var err error
	if s.denials != nil {
		pass, err = s.decideCached(ctx, rest, restResults)
	} else {
		pass, err = s.decideAll(ctx, rest, restResults)
	}
	if n > 0 {
		j := 0
		for i := range reqs {
			if covered[i] == 0 {
				results[i] = restResults[j]
				j++
			} else if !pass {
				results[i].Admitted = 0 // allowed, not recorded: as a peek
			}
		}
	}
	if err != nil || !pass {
		s.returnCovered(reqs, covered)
	}
	return pass, err
}

func (s *Store) returnCovered(reqs []store.Request, covered []uint64) {
	for i, gen := range covered {
		if gen != 0 {
			s.leases.giveBack(reqs[i].Key, reqs[i].Cost, gen)
		}
	}
}

// sweep gives back, every LeaseFor/2, what leases past their deadline
// have left, until the store closes; then it gives back every lease.
func (s *Store) sweep() {
	l := s.leases
	defer close(l.done)
	t := time.NewTicker(max(l.leaseFor/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.giveBackExpired(monoNow(), false)
		case <-l.stop:
			s.giveBackExpired(monoNow(), true)
			return
		}
	}
}

type leftover struct {
	key, tag      string
	limit, window int64
	units, end    int64
}

// giveBackExpired returns the units of leases past their deadline (all
// leases when all is set) to their windows, and leaves them.
func (s *Store) giveBackExpired(now int64, all bool) {
	l := s.leases
	var out []leftover
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, kl := range sh.m {
			if kl.busy || kl.left == 0 && kl.deadline == 0 {
				if now-kl.since > 10*int64(l.leaseFor) && !kl.busy {
					delete(sh.m, k) // not seen for a while
				}
				continue
			}
			if all || now >= kl.deadline {
				out = append(out, leftover{kl.key, kl.tag, kl.limit, kl.window, kl.left, kl.end})
				kl.left, kl.deadline = 0, 0
			}
		}
		sh.mu.Unlock()
	}
	if len(out) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	execs := make([]rueidis.LuaExec, len(out))
	for i, o := range out {
		execs[i] = rueidis.LuaExec{Keys: []string{keyName(s.prefix, o.key, o.tag) + fixedWindowShape},
			Args: []string{"", itoa(o.window), itoa(o.limit), "0", l.taker, itoa(o.units), itoa(o.end), "0"}}
	}
	if c := s.client(); c != nil {
		leaseScript.ExecMulti(ctx, bounded{c}, execs...) // best effort: units not given back wait for their window's end
	}
}

var _ store.Leaser = (*Store)(nil)

// LeaseStats implements store.Leaser (zero when leases are off).
func (s *Store) LeaseStats() store.LeaseStats {
	var st store.LeaseStats
	if s.leases == nil {
		return st
	}
	now := monoNow()
	for i := range s.leases.shards {
		sh := &s.leases.shards[i]
		sh.mu.Lock()
		st.Keys += int64(len(sh.m))
		for _, kl := range sh.m {
			if now < kl.deadline {
				st.Leased += kl.left
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// fixedWindowShape is the suffix of every fixed window's state key
// (algo.Plan.ShapeKey), whatever its limit and window.
var fixedWindowShape = algo.MustCompile(algo.FixedWindow{Count: 1, Window: time.Second}).ShapeKey()
