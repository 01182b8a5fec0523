package httplimit

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

// holding is a request that holds slots of concurrency limits
// (algo.Concurrency) while it runs. A client that goes away cancels the
// request's context: a handler that stops then releases at once, one that
// does not keeps its slots until it returns, since its work is still in
// flight. Should a renewal find the slots gone (their hold ended while
// the store was out of reach), the request's context is cancelled with
// sluice.ErrLost as its cause.
//
// It holds its path and permit, until the
// next handler returns. It is renewed by a timer (time.AfterFunc), so that
// a request holding slots costs no goroutine beyond its own but while a
// renewal runs.
type holding struct {
	l      *Middleware
	q      policy.Query // the path, for renewals and the release
	paths  [1]policy.PathQuery
	every  time.Duration
	ctx    context.Context // the request's, whose values renewals keep
	cancel context.CancelCauseFunc

	mu      sync.Mutex // held while a renewal runs: release waits for it
	t       *time.Timer
	stopped bool
}

// hold starts renewing d's permit on path every third of the shortest
// hold_for of its concurrency levels, and returns the request to serve,
// whose context is cancelled if the slots are lost.
func (l *Middleware) hold(r *http.Request, path []string, d *policy.Decision) (*holding, *http.Request) {
	hold := time.Duration(0)
	for i := range d.Levels {
		if lv := &d.Levels[i]; lv.Limit != nil && lv.Limit.Kind() == algo.KindConcurrency {
			if h := lv.Limit.Spec().HoldFor; hold == 0 || h < hold {
				hold = h
			}
		}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	h := &holding{l: l, every: hold / 3, ctx: r.Context(), cancel: cancel}
	h.paths[0].Path = append([]string(nil), path...)
	h.q.Paths, h.q.Permit = h.paths[:], d.Permit
	h.mu.Lock()
	h.t = time.AfterFunc(h.every, h.renew)
	h.mu.Unlock()
	return h, r.WithContext(ctx)
}

// renew renews the permit once, on the timer's goroutine, and sets the
// timer for the next renewal, or cancels the request's context with
// sluice.ErrLost when the slots are gone.
func (h *holding) renew() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.l.timeout)
	var d policy.Decision
	h.q.Op = policy.Renew
	err := h.l.checker.Decide(ctx, &h.q, &d)
	cancel()
	if err == nil && !d.Allowed {
		h.cancel(sluice.ErrLost)
		return
	}
	h.t.Reset(h.every)
}

// release stops renewing and gives the slots back, within the check's
// timeout, whether or not the client is still there.
func (h *holding) release(r *http.Request) {
	h.mu.Lock() // after a renewal in flight
	h.stopped = true
	h.t.Stop()
	h.mu.Unlock()
	h.cancel(nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.l.timeout)
	defer cancel()
	var d policy.Decision
	h.q.Op = policy.Release
	if err := h.l.checker.Decide(ctx, &h.q, &d); err != nil {
		h.l.logFailure(r, err)
	}
}
