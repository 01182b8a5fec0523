package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Global limits (Options.Home; docs/multi-region.md): one fixed-window
// limit across regions, each region with its own store. A request with
// Global set is decided in this (the regional) store, in the same
// DecideAll as its regional levels, from the region's share of the
// window: units charged at home before the region may spend them
// (fixed_window.lua's flag 'g' admits only within them). In the
// background, every GlobalEvery, one store a region (the one that claims
// the key's share, global_pool.lua) sizes the share by the region's demand
// (algo.Share): it charges home (global_home.lua) and then credits the
// share, or takes unspent units back from the share and then gives them
// home. Every unit a region admits was charged at home for that window
// first, so that all the regions together admit at most the limit in a
// window, whatever the latency to home; a region cut off from home spends
// what it holds, then denies, or admits GlobalAllowance more once a
// window.

// defaultGlobalEvery is Options.GlobalEvery when zero.
const defaultGlobalEvery = 100 * time.Millisecond

// maxGlobalKeys bounds the global keys a store follows; beyond it a new
// key is not followed (its share is never refilled, so it denies) until a
// followed one has gone unseen for two of its windows.
const maxGlobalKeys = 1 << 14

// refillsInFlight bounds the keys a store refills at once.
const refillsInFlight = 64

var (
	globalPoolScript = embeddedScript("expire.lua", "global_pool.lua")
	globalHomeScript = embeddedScript("expire.lua", "global_home.lua")
	globalHomeSource = mustRead("expire.lua") + "\n" + mustRead("global_home.lua") + "\n"
)

func mustRead(name string) string {
	b, err := scripts.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

// globals is a store's global limits: the keys it follows and their home.
type globals struct {
	home      *Store
	every     time.Duration
	allowance int64
	replicas  int
	holder    string
	ownsHome  bool

	// what the refills did (ShareStats)
	credited, givenBack, homeFailures atomic.Int64

	mu   sync.RWMutex
	keys map[string]*globalKey // by the share's Redis key
	kick chan struct{}         // a new key: refill now
	stop chan struct{}
	done chan struct{}
}

// globalKey is what a store knows of one global key's share.
type globalKey struct {
	share, home   string       // Redis keys: the share's (regional), home's (+ ":<window end>")
	limit, window int64        // the fixed window (µs)
	seen          atomic.Int64 // local clock (ns): last decided
	e, d, now     int64        // the last reading of the share: window end, demand, time (µs)
	rate          float64
	read          bool
}

func newGlobals(home *Store, every time.Duration, allowance int64, replicas int) *globals {
	var id [6]byte
	rand.Read(id[:])
	if every <= 0 {
		every = defaultGlobalEvery
	}
	return &globals{home: home, every: every, allowance: allowance, replicas: replicas, holder: hex.EncodeToString(id[:]),
		keys: make(map[string]*globalKey), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// global checks a request with Global set, which the store decides from
// its share, and follows its key: a fixed window of a duration, with no
// block and no debt (policy says so of a global node, with file and line).
func (s *Store) global(r *store.Request) error {
	if r.Plan.Kind() != algo.KindFixedWindow {
		return fmt.Errorf("%w: a global limit is a fixed window, not %v", store.ErrBadRequest, r.Plan.Kind())
	}
	_, blocks := r.Plan.Blocks()
	fw := limitOf[algo.FixedWindow](r.Plan)
	if blocks || r.Plan.Debt() || fw.Calendar != (algo.Calendar{}) {
		return fmt.Errorf("%w: a global limit is a fixed window of a duration, with no block and no debt", store.ErrBadRequest)
	}
	g := s.globals
	share := s.stateKey(*r)
	now := monoNow()
	g.mu.RLock()
	k := g.keys[share]
	g.mu.RUnlock()
	if k != nil && k.limit == fw.Count && k.window == fw.Window.Microseconds() {
		k.seen.Store(now)
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.keys) >= maxGlobalKeys {
		g.forget(now)
		if len(g.keys) >= maxGlobalKeys {
			return nil // not followed: its share stays as it is
		}
	}
	k = &globalKey{share: share, home: keyName(g.home.prefix, r.Key, r.Tag) + "%:global:",
		limit: fw.Count, window: fw.Window.Microseconds()}
	k.seen.Store(now)
	g.keys[share] = k
	select {
	case g.kick <- struct{}{}:
	default:
	}
	return nil
}

// forget drops the keys unseen for two of their windows (and at least ten
// refills). g.mu is held.
func (g *globals) forget(now int64) {
	for name, k := range g.keys {
		if now-k.seen.Load() > max(2*k.window*int64(time.Microsecond), 10*int64(g.every)) {
			delete(g.keys, name)
		}
	}
}

// refill refills every followed key's share every GlobalEvery (and at
// once for a new key), until the store closes.
func (s *Store) refill() {
	g := s.globals
	defer close(g.done)
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*g.every+2*s.timeout)
		s.refillAt(ctx, time.Time{}, 2*g.every)
		cancel()
	}
}

// refillAt refills the share of every followed key at time at (the zero
// time: Redis TIME, as the decisions on the store's clock), with horizon
// the time until the next refill lands; the keys are refilled in
// parallel (at most refillsInFlight at once), each with one to three
// calls to this store and up to two home.
func (s *Store) refillAt(ctx context.Context, at time.Time, horizon time.Duration) {
	g := s.globals
	g.mu.Lock()
	g.forget(monoNow())
	keys := make([]*globalKey, 0, len(g.keys))
	for _, k := range g.keys {
		keys = append(keys, k)
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, refillsInFlight)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.refillKey(ctx, k, at, horizon)
		}()
	}
	wg.Wait()
}

// refillKey reads k's share (claiming its refilling), and asks home for
// units or gives some back, as algo.Share says. Units charged at home
// are credited to the share after; units taken back from the share are
// given home after: a failure between the two leaves them with neither
// (lost to the window, never admitted twice).
func (s *Store) refillKey(ctx context.Context, k *globalKey, at time.Time, horizon time.Duration) {
	g := s.globals
	v, err := s.pool(ctx, k, at, horizon.Microseconds()*2, 0, 0, 0, 0)
	if err != nil || v.claimed == 0 {
		return
	}
	k.observe(v, horizon.Microseconds())
	ask, back := algo.Share{Limit: k.limit, Held: max(v.s-v.n, 0), Rate: k.rate, Left: v.e - v.now,
		Horizon: horizon.Microseconds()}.Step()
	switch {
	case ask > 0:
		granted, err := g.charge(ctx, k, v.e, ask, 0)
		if err != nil {
			if g.allowance > 0 {
				s.pool(ctx, k, at, 0, 0, 0, 0, g.allowance) // cut off from home: the window's allowance
			}
			return
		}
		if granted > 0 {
			s.credit(ctx, k, at, v.e, granted)
		}
	case back > 0:
		w, err := s.pool(ctx, k, at, 0, v.e, 0, back, 0)
		if err == nil && w.taken > 0 {
			if _, err := g.charge(ctx, k, v.e, 0, w.taken); err == nil {
				g.givenBack.Add(w.taken)
			}
		}
	}
	// Within a horizon of the window's end, the next window's first
	// horizon is charged ahead, so that the region does not start it
	// empty: credited to the next window only (ne, ns), it becomes that
	// window's share when the window starts.
	if v.e-v.now < horizon.Microseconds() && k.rate > 0 {
		ask, _ := algo.Share{Limit: k.limit, Held: v.ahead, Rate: k.rate, Left: k.window, Horizon: horizon.Microseconds()}.Step()
		next := v.e + k.window
		if ask > 0 {
			if granted, err := g.charge(ctx, k, next, ask, 0); err == nil && granted > 0 {
				s.credit(ctx, k, at, next, granted)
			}
		}
	}
}

// credit credits units charged at home to k's share of the window ending
// at end.
func (s *Store) credit(ctx context.Context, k *globalKey, at time.Time, end, units int64) {
	if _, err := s.pool(ctx, k, at, 0, end, units, 0, 0); err == nil {
		s.globals.credited.Add(units)
	}
}

// ShareStats implements store.Sharer (zero without a home).
func (s *Store) ShareStats() store.ShareStats {
	g := s.globals
	if g == nil {
		return store.ShareStats{}
	}
	g.mu.RLock()
	keys := len(g.keys)
	g.mu.RUnlock()
	return store.ShareStats{Keys: int64(keys), Credited: g.credited.Load(), GivenBack: g.givenBack.Load(), HomeFailures: g.homeFailures.Load()}
}

// observe takes the region's demand rate from a reading of the share: the
// units asked since the last reading, over the time since; in a new
// window, the last window's rate, or for a key never read, what it was
// asked so far over at least a horizon (µs).
func (k *globalKey) observe(v poolReply, horizon int64) {
	switch {
	case k.read && v.e == k.e && v.now > k.now:
		k.rate = float64(v.d-k.d) / float64(v.now-k.now)
	case !k.read:
		k.rate = float64(v.d) / float64(max(v.now-(v.e-k.window), horizon, 1))
	}
	k.e, k.d, k.now, k.read = v.e, v.d, v.now, true
}

type poolReply struct {
	now, e, n, s, d, taken, claimed, ahead int64
}

// pool runs global_pool.lua on k's share.
func (s *Store) pool(ctx context.Context, k *globalKey, at time.Time, claim, end, credit, takeBack, allowance int64) (poolReply, error) {
	ctx, cancel, c, err := s.boundedCall(ctx)
	if err != nil {
		return poolReply{}, err
	}
	defer cancel()
	now := ""
	if !at.IsZero() {
		now = itoa(at.UnixMicro())
	}
	v, err := globalPoolScript.Exec(ctx, c, []string{k.share}, []string{now, itoa(k.window), s.globals.holder, itoa(claim),
		itoa(end), itoa(credit), itoa(takeBack), itoa(allowance)}).AsIntSlice()
	if err == nil && len(v) != 8 {
		err = fmt.Errorf("global_pool replied %d values", len(v))
	}
	if err != nil {
		return poolReply{}, fmt.Errorf("redis store: global share: %w", err)
	}
	return poolReply{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
}

// charge runs global_home.lua at home for k's window ending at end: it
// charges up to want units and gives back back, and returns the units
// granted. With HomeReplicas, the units are granted only once that many
// replicas of home have them (WAIT, for up to five refills), so that
// home's failover loses none.
func (g *globals) charge(ctx context.Context, k *globalKey, end, want, back int64) (int64, error) {
	ctx, cancel, c, err := g.home.boundedCall(ctx)
	if err != nil {
		g.homeFailures.Add(1)
		return 0, err
	}
	defer cancel()
	keys := []string{k.home + itoa(end)}
	args := []string{itoa(k.limit), itoa(want), itoa(back), itoa(end), itoa(k.window)}
	var v []int64
	if g.replicas <= 0 {
		v, err = globalHomeScript.Exec(ctx, c, keys, args).AsIntSlice()
	} else {
		// EVAL, not EVALSHA, so that WAIT follows it on one connection
		// whatever Redis has loaded; home is called once a refill a key.
		rs := c.DoMulti(ctx,
			c.B().Eval().Script(globalHomeSource).Numkeys(1).Key(keys...).Arg(args...).Build(),
			c.B().Wait().Numreplicas(int64(g.replicas)).Timeout(max(int64(5*g.every/time.Millisecond), 1)).Build())
		v, err = rs[0].AsIntSlice()
		if err == nil {
			var acked int64
			if acked, err = rs[1].AsInt64(); err == nil && acked < int64(g.replicas) && len(v) == 2 {
				// Not on enough replicas: a failover could lose the charge,
				// so the units are not spent (lost to the window).
				err = fmt.Errorf("%w: %d of %d replicas of home have the charge", errNotReplicated, acked, g.replicas)
			}
		}
	}
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("global_home replied %d values", len(v))
	}
	if err != nil {
		g.homeFailures.Add(1)
		return 0, fmt.Errorf("redis store: global home: %w", err)
	}
	return v[0], nil
}

var errNotReplicated = errors.New("not replicated")
