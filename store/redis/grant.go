package redis

import (
	"context"
	"fmt"
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

var _ store.Granter = (*Store)(nil)

// Grant implements store.Granter with leases (Options.LeaseFor): every
// request must be leasable (Lease set, a fixed window, the store's clock);
// otherwise, or with leases off, it grants nothing. Each request's key
// gets a lease of units x Cost from lease.lua (one pipelined round trip),
// under the same rule as the store's own leases; the grant is the fewest
// requests any key granted, and what the others granted beyond it is
// given back at once. A grant is at most MaxLease units. Until is LeaseFor
// from now at most, and no later
// than any window's end on the local clock, so the client admits nothing
// outside the windows the units were counted in: zero over-admission. The
// client never gives back what it does not use: at most Units are lost to
// the windows until they end.
func (s *Store) Grant(ctx context.Context, reqs []store.Request, units int64) (store.Grant, error) {
	if s.leases == nil || units <= 0 || len(reqs) == 0 {
		return store.Grant{}, nil
	}
	units = min(units, s.leases.maxLease)
	fws := make([]algo.FixedWindow, len(reqs))
	for i := range reqs {
		fw, ok := leasable(&reqs[i])
		if !ok {
			return store.Grant{}, nil
		}
		fws[i] = fw
	}
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return store.Grant{}, err
	}
	defer cancel()
	taker := "grants-" + s.leases.taker
	call := func(i int, k, least, back, end int64) rueidis.LuaExec {
		fw := fws[i]
		return rueidis.LuaExec{Keys: []string{s.stateKey(reqs[i])}, Args: []string{"", itoa(fw.Window.Microseconds()), itoa(fw.Count),
			itoa(k), taker, itoa(back), itoa(end), itoa(least)}}
	}
	// giveBack returns what each key granted beyond keep requests.
	giveBack := func(ctx context.Context, g leaseGrant, keep int64) error {
		var back []rueidis.LuaExec
		for i, r := range reqs {
			if extra := g.granted[i] - keep*r.Cost; extra > 0 {
				back = append(back, call(i, 0, 0, extra, g.ends[i]))
			}
		}
		if len(back) == 0 {
			return nil
		}
		for _, r := range leaseScript.ExecMulti(ctx, bounded{s.client()}, back...) { // also after the call, on the caller's goroutine
			if err := r.Error(); err != nil {
				return fmt.Errorf("redis store: grant: give back: %w", err)
			}
		}
		return nil
	}
	wall := time.Now()
	g, err := detached(ctx, s.timeout, func(ctx context.Context) (leaseGrant, error) {
		execs := make([]rueidis.LuaExec, len(reqs))
		for i, r := range reqs {
			execs[i] = call(i, units*r.Cost, r.Cost, 0, 0)
		}
		g := leaseGrant{units: units, left: s.leases.leaseFor, granted: make([]int64, len(reqs)), ends: make([]int64, len(reqs))}
		var err error
		for i, r := range leaseScript.ExecMulti(ctx, s.client(), execs...) {
			v, e := r.AsIntSlice()
			if e == nil && len(v) != 4 {
				e = fmt.Errorf("lease replied %d values", len(v))
			}
			if e != nil {
				err = fmt.Errorf("redis store: grant: %w", e) // what was granted waits for its window's end
				continue
			}
			g.granted[i], g.ends[i] = v[1], v[2]
			g.units = min(g.units, v[1]/reqs[i].Cost)
			g.left = min(g.left, time.Duration(v[2]-v[0])*time.Microsecond)
		}
		if err != nil {
			giveBack(ctx, g, 0)
			return leaseGrant{}, err
		}
		return g, nil
	}, func(ctx context.Context, g leaseGrant) { giveBack(ctx, g, 0) })
	if err != nil {
		return store.Grant{}, err
	}
	// What a key granted beyond the fewest requests any key granted goes
	// back at once, within the store's timeout, as the call did.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	err = giveBack(gctx, g, g.units)
	cancel()
	if err != nil {
		return store.Grant{}, err
	}
	if g.units == 0 {
		return store.Grant{}, nil
	}
	// Redis's now came after wall was read: Until is no later than the
	// windows' ends.
	return store.Grant{Units: g.units, Until: wall.Add(g.left)}, nil
}

// leaseGrant is what lease.lua granted a grant's keys: granted[i] units
// of window end ends[i] for request i; units is the fewest requests any
// key granted, left the shortest time to a window's end.
type leaseGrant struct {
	units         int64
	left          time.Duration
	granted, ends []int64
}
