package httplimit

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

// A SlotChecker is a PathChecker that can hold slots of concurrency limits
// (algo.Concurrency) while a request runs; policy.Checker is one. The
// middleware then checks with Acquire: a path that hits a concurrency
// limit takes its slots under a permit id (policy.Decision.Permit), which
// the middleware renews while the next handler runs and releases when it
// returns, normally or by a panic. A client that goes away
// cancels the request's context: a handler that stops then releases at
// once, one that does not keeps its slots until it returns, since its
// work is still in flight. Should a renewal find the slots gone (their
// hold ended while the store was out of reach), the request's context is
// cancelled with sluice.ErrLost as its cause.
type SlotChecker interface {
	PathChecker
	Acquire(ctx context.Context, q *policy.Query, permit int64, d *policy.Decision) error
	Renew(ctx context.Context, q *policy.Query, permit int64, d *policy.Decision) error
	Release(ctx context.Context, q *policy.Query, permit int64, d *policy.Decision) error
}

// holding is a request that holds slots: its path and permit, until the
// next handler returns.
type holding struct {
	l      *Middleware
	q      *policy.Query // the path, for renewals and the release
	permit int64
	stop   chan struct{}
	done   chan struct{}
}

// hold starts renewing d's permit on path every third of the shortest
// hold_for of its concurrency levels, and returns the request to serve,
// whose context the renewer cancels if the slots are lost.
func (l *Middleware) hold(r *http.Request, sh SlotChecker, path []string, d *policy.Decision) (*holding, *http.Request) {
	hold := time.Duration(0)
	for i := range d.Levels {
		if lv := &d.Levels[i]; lv.Limit != nil && lv.Limit.Kind() == algo.KindConcurrency {
			if h := lv.Limit.Spec().HoldFor; hold == 0 || h < hold {
				hold = h
			}
		}
	}
	q := &policy.Query{Paths: []policy.PathQuery{{Path: append([]string(nil), path...)}}}
	h := &holding{l: l, q: q, permit: d.Permit, stop: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(r.Context())
	go func() {
		defer close(h.done)
		defer cancel(nil)
		t := time.NewTicker(hold / 3)
		defer t.Stop()
		var rd policy.Decision
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.timeout)
			err := sh.Renew(rctx, h.q, h.permit, &rd)
			rcancel()
			if err == nil && !rd.Allowed {
				cancel(sluice.ErrLost)
				return
			}
		}
	}()
	return h, r.WithContext(ctx)
}

// release stops renewing and gives the slots back, within the check's
// timeout, whether or not the client is still there.
func (h *holding) release(r *http.Request, sh SlotChecker) {
	close(h.stop)
	<-h.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.l.timeout)
	defer cancel()
	var d policy.Decision
	if err := sh.Release(ctx, h.q, h.permit, &d); err != nil {
		h.l.logFailure(r, err)
	}
}
