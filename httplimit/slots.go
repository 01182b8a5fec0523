package httplimit

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/renewal"
	"github.com/sluicehq/sluice/policy"
)

// requestPermit is the permit a request holds slots of concurrency limits
// (algo.Concurrency) under, with its path, until the next handler returns.
// A client that goes away cancels the request's context: a handler that
// stops then releases at once, one that does not keeps its slots until it
// returns, since its work is still in flight. Should a renewal find the
// slots gone (their hold ended while the store was out of reach), the
// request's context is cancelled with sluice.ErrLost as its cause. A renewer (internal/renewal) of
// its hold renews it: a request holding slots costs no goroutine beyond
// its own but while a renewal runs.
type requestPermit struct {
	sync.Mutex // held while a renewal runs: release waits for it
	entry      renewal.Entry
	l          *Middleware
	q          policy.Query // the path, for renewals and the release
	paths      [1]policy.PathQuery
	ctx        context.Context // the request's, whose values renewals keep
	cancel     context.CancelCauseFunc
}

// renewers are the middlewares' renewers, eight a hold (a renewer renews
// the permits of one hold), as a Limiter's: a request's is picked by its
// permit id, so that requests on several cores seldom meet on one lock,
// each with at most 8 renewals in flight.
var renewers sync.Map // [2]int64{hold, permit % 8} -> *renewal.Renewer

// hold starts renewing d's permit on path every sixth to third of the
// shortest hold_for of its concurrency levels, and returns the request to
// serve, whose context is cancelled if the slots are lost.
func (l *Middleware) hold(r *http.Request, path []string, d *policy.Decision) (*requestPermit, *http.Request) {
	hold := time.Duration(0)
	for i := range d.Levels {
		if lv := &d.Levels[i]; lv.Limit != nil && lv.Limit.Kind() == algo.KindConcurrency {
			if h := lv.Limit.Spec().HoldFor; hold == 0 || h < hold {
				hold = h
			}
		}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	h := &requestPermit{l: l, ctx: r.Context(), cancel: cancel}
	h.paths[0].Path = append([]string(nil), path...)
	h.q.Paths, h.q.Permit = h.paths[:], d.Permit
	key := [2]int64{int64(hold), d.Permit & 7}
	rn, ok := renewers.Load(key)
	if !ok {
		rn, _ = renewers.LoadOrStore(key, new(renewal.Renewer))
	}
	rn.(*renewal.Renewer).Add(&h.entry, h, hold)
	return h, r.WithContext(ctx)
}

// Renew renews the permit once, for its renewer, within the check's
// timeout; a store's failure is tried again at the next renewal, however
// long it lasts.
func (h *requestPermit) Renew(time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.l.timeout)
	defer cancel()
	var d policy.Decision
	h.q.Op = policy.Renew
	err := h.l.checker.Decide(ctx, &h.q, &d)
	return d.Allowed, err
}

// MarkLost cancels the request's context with sluice.ErrLost: the slots
// are gone.
func (h *requestPermit) MarkLost() { h.cancel(sluice.ErrLost) }

// release stops renewing and gives the slots back, within the check's
// timeout, whether or not the client is still there.
func (h *requestPermit) release(r *http.Request) {
	h.Lock() // after a renewal in flight
	h.entry.Stop()
	h.Unlock()
	h.cancel(nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.l.timeout)
	defer cancel()
	var d policy.Decision
	h.q.Op = policy.Release
	if err := h.l.checker.Decide(ctx, &h.q, &d); err != nil {
		h.l.logFailure(r, err)
	}
}
