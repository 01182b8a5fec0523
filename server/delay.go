package server

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// A policy node with a delay admits a request that would be denied, its
// units reserved, and says how long to wait (policy.Decision.Delay). The
// HTTP check API answers at once with delay_ns, for the caller to wait.
// gRPC and the forward-auth endpoint wait themselves before they answer
// OK (so an Envoy, nginx, Caddy or Traefik in front holds the request),
// at most max_waiting requests at once: beyond them a delayed request is
// refused at once. A caller that goes away, or whose gRPC deadline comes
// before the delay ends, gets its units back.

// defaultMaxWaiting is max_waiting's default.
const defaultMaxWaiting = 10_000

// hold waits out d.Delay for the paths of q. It reports whether the
// caller may go on; when it may not, it has given the units back and
// made d a denial: ctx ended first (gRPC: or its deadline is before the
// delay's end), or max_waiting requests are already held.
func (s *Server) hold(ctx context.Context, api string, q *policy.Query, d *policy.Decision) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.Delay {
		s.giveBack(ctx, q, d)
		return false
	}
	if s.waiting.Add(1) > int64(s.cfg.MaxWaiting) {
		s.waiting.Add(-1)
		s.m.delayRefused.WithLabelValues(api).Inc()
		s.giveBack(ctx, q, d)
		return false
	}
	defer s.waiting.Add(-1)
	s.m.delayed.WithLabelValues(api).Inc()
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		s.giveBack(ctx, q, d)
		return false
	}
}

// giveBack undoes what q's allowed decision took and makes d a denial to
// be retried after its delay.
func (s *Server) giveBack(ctx context.Context, q *policy.Query, d *policy.Decision) {
	uctx, cancel := s.storeCtx(context.WithoutCancel(ctx))
	defer cancel()
	op := q.Op
	q.Op = policy.GiveBack
	err := s.checker.Decide(uctx, q, &policy.Decision{})
	q.Op = op
	if err != nil {
		s.m.storeErrors.Inc()
		if n, ok := s.errLog.Allow(time.Now()); ok {
			s.log.Error("store failed to give back a delayed request's units", "err", err, "suppressed", n)
		}
	}
	d.Withdraw()
}
