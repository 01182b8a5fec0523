// Package httplimit is Sluice's net/http middleware: it keys each request
// (client IP, a header such as an API key, or a function), maps it to a
// policy path such as api / <key> / <route>, checks the path with a
// PathChecker (a *policy.Checker), and either passes the request on with
// rate-limit headers or answers 429 Too Many Requests. It works with any
// router, since a Middleware's Wrap method is a plain
// func(http.Handler) http.Handler.
//
//	l := httplimit.New(checker, httplimit.Options{
//		Key:  httplimit.IPKey{TrustedProxies: proxies}.Key,
//		Path: func(r *http.Request, key string, p []string) []string { return append(p, "api", key) },
//	})
//	http.ListenAndServe(":8080", l.Wrap(mux))
//
// # Responses
//
// An allowed request reaches the next handler with the rate-limit headers
// already set (Options.Headers): by default the RateLimit-Policy and
// RateLimit fields of draft-ietf-httpapi-ratelimit-headers-10 (see
// DraftHeaders for how each level and algorithm maps to them), or the
// legacy X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset.
//
// A denied request gets the same headers, Retry-After, and
// Options.OnLimited, by default QuotaExceeded: 429 with an
// application/problem+json body of the draft's quota-exceeded problem
// type. Retry-After is the time until the denying levels admit the
// request again, in whole seconds rounded up and at least 1: it is never
// earlier than the reset (t) the RateLimit field gives for any level that
// denied. A request whose cost exceeds a limit can never be admitted: it
// gets no Retry-After, and a problem detail saying so.
//
// # Failures
//
// The check runs under a deadline of Options.Timeout (50 ms by default,
// 50ms), counted from the checker's first look at its context (for the
// sluice checkers, when they call the store, microseconds in; a checker
// that never looks, such as one on the memory store, costs no timer and no
// clock read): a store that is down or stalled makes Check fail within it,
// as the sluice stores do (the bound holds for a PathChecker that honours its
// context). A failed check is handled by Options.Failure: FailOpen (the
// default) serves the request without rate-limit headers, logs the error
// with log/slog (at most one line a second, with a count of those left
// out) and counts it (Middleware.StoreErrors, Options.OnStoreError);
// FailClosed answers 503 with a problem+json body. Errors that are the
// request's fault (a KeyFunc's error, or a check error wrapping
// store.ErrBadRequest, such as a key too long for the store) are not
// store failures and never fail open: they get Options.OnBadRequest, by
// default 400. A request whose client has gone away (its context is done)
// gets no answer at all.
//
// # Lua limiters
//
// NewScript runs a user-supplied Lua script in Redis instead of a
// PathChecker: reply.go states the scripts' contract.
package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// A PathChecker decides a request path with the policy's one verb: it
// does q.Op with q's paths, fills d (Allowed, Matched, Summary and Levels,
// reusing the capacity of d.Levels) or returns an error. The policy
// package's *Checker is one. The middleware decides with policy.Acquire:
// a path that hits a concurrency limit takes its slots under a permit id
// (policy.Decision.Permit), which the middleware renews (policy.Renew)
// while the next handler runs and releases (policy.Release) when it
// returns, normally or by a panic; a request that a policy delay holds
// (policy.Decision.Delay) whose client goes away, or that finds
// MaxWaiting requests already waiting, gets its units back
// (policy.GiveBack). Decide must honour ctx's deadline and must not keep
// q or d after it returns.
type PathChecker interface {
	Decide(ctx context.Context, q *policy.Query, d *policy.Decision) error
}

// defaultTimeout bounds a check when Options.Timeout is zero.
const defaultTimeout = 50 * time.Millisecond

// defaultMaxWaiting bounds the requests a Middleware holds at once for a
// policy's delay when Options.MaxWaiting is zero.
const defaultMaxWaiting = 1000

// A PathFunc returns the policy path of a request whose key is key, by
// appending its segments to path (which is empty, with room for 8
// segments, so that appending usually allocates nothing). Segments are used
// as they are: the policy's key layer escapes them.
type PathFunc func(r *http.Request, key string, path []string) []string

// FailurePolicy says what to do when a check fails.
type FailurePolicy int

const (
	// FailOpen serves the request, without rate-limit headers, and logs and
	// counts the error.
	FailOpen FailurePolicy = iota
	// FailClosed answers 503 Service Unavailable with a problem+json body,
	// and logs and counts the error.
	FailClosed
)

// Options configure a Middleware. The zero Options keys requests by the
// peer's IP address, checks the path [ip] at cost 1, sends the draft's
// RateLimit headers, and fails open after 50ms.
type Options struct {
	// Key names the caller. Nil means IPKey{}.Key: the peer's address,
	// with no proxy trusted.
	Key KeyFunc
	// Path maps a request and its key to the policy path. Nil means the
	// path with the key alone.
	Path PathFunc
	// Cost is what a request consumes. Nil means 1 for every request.
	Cost func(r *http.Request) int64
	// Headers selects the rate-limit headers; the zero value is
	// DraftHeaders.
	Headers HeaderStyle
	// OnLimited answers a denied request, whose rate-limit headers and
	// Retry-After are already set. Nil means QuotaExceeded. d is valid
	// only during the call.
	OnLimited func(w http.ResponseWriter, r *http.Request, d *policy.Decision)
	// OnBadRequest answers a request that cannot be checked through its
	// own fault (see the package documentation). Nil means BadRequest.
	OnBadRequest func(w http.ResponseWriter, r *http.Request, err error)
	// Failure says what to do when the check fails: FailOpen (the zero
	// value) or FailClosed.
	Failure FailurePolicy
	// Timeout bounds the check; zero means 50 ms.
	Timeout time.Duration
	// Logger receives store failures; nil means slog.Default().
	Logger *slog.Logger
	// OnStoreError, if set, is called with every failed check, after it is
	// counted and before the request is answered.
	OnStoreError func(r *http.Request, err error)
	// MaxWaiting bounds the requests held at once for a policy's delay
	// (a node with delay: {max: ...}): a request that would be the next is
	// answered at once as limited, its units given back. Zero means
	// 1000; negative, none held (every delayed request is
	// limited).
	MaxWaiting int
	// OnDecision, if set, is called with every decision, allowed or not,
	// before the request is answered: a place for metrics, and the only
	// place where denials by shadow levels show. d is valid only during the
	// call.
	OnDecision func(r *http.Request, d *policy.Decision)
}

// A Middleware limits the rate of the HTTP requests that go through it. It is safe for concurrent use.
type Middleware struct {
	checker PathChecker
	script  *scriptLimit
	opts    Options
	timeout time.Duration

	storeErrors atomic.Uint64
	logEvery    ratelog.Every // store errors: one line a second
	waiting     atomic.Int64  // requests held for a delay now
	maxWaiting  int64
}

// Waiting returns how many requests the Middleware holds for a policy's
// delay now.
func (l *Middleware) Waiting() int64 { return l.waiting.Load() }

// New returns a Middleware that checks requests with c. It panics if c is nil.
func New(c PathChecker, opts Options) *Middleware {
	if c == nil {
		panic("httplimit: nil PathChecker")
	}
	l := &Middleware{checker: c}
	l.setOptions(opts)
	return l
}

func (l *Middleware) setOptions(opts Options) {
	if opts.Key == nil {
		opts.Key = IPKey{}.Key
	}
	if opts.OnLimited == nil {
		opts.OnLimited = QuotaExceeded
	}
	if opts.OnBadRequest == nil {
		opts.OnBadRequest = BadRequest
	}
	l.timeout = opts.Timeout
	if l.timeout <= 0 {
		l.timeout = defaultTimeout
	}
	l.maxWaiting = int64(opts.MaxWaiting)
	switch {
	case opts.MaxWaiting == 0:
		l.maxWaiting = defaultMaxWaiting
	case opts.MaxWaiting < 0:
		l.maxWaiting = 0
	}
	l.opts = opts
}

// StoreErrors returns how many checks have failed since the Middleware was
// made.
func (l *Middleware) StoreErrors() uint64 { return l.storeErrors.Load() }

// Wrap returns next behind the limiter.
func (l *Middleware) Wrap(next http.Handler) http.Handler {
	if l.script != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serveScript(w, r, next) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}

// request is what a request needs that cannot be pooled, in one
// allocation: the checker's context (which a misbehaving checker could keep)
// and the backing array of the header values (which the response's header
// map keeps).
type request struct {
	ctx   deadlineCtx
	value [4]string
}

// scratch is what a request needs only during its check, pooled: the
// Decision, whose Levels keep their capacity, and room for the path.
type scratch struct {
	d    policy.Decision
	path [8]string
	q    policy.Query // the one-path query
}

// query returns the scratch's query of op on one path at cost, keeping
// the capacity of its Hits.
func (sc *scratch) query(op policy.Op, path []string, cost int64) *policy.Query {
	if len(sc.q.Paths) == 0 {
		sc.q.Paths = make([]policy.PathQuery, 1)
	}
	pq := &sc.q.Paths[0]
	*pq = policy.PathQuery{Path: path, Cost: cost, Match: policy.Match{Hits: pq.Match.Hits[:0]}}
	sc.q = policy.Query{Paths: sc.q.Paths, Op: op}
	return &sc.q
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func (l *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := l.opts.Key(r)
	if err != nil {
		l.opts.OnBadRequest(w, r, err)
		return
	}
	sc := scratches.Get().(*scratch)
	path := sc.path[:0]
	if l.opts.Path != nil {
		path = l.opts.Path(r, key, path)
	} else {
		path = append(path, key)
	}
	cost := int64(1)
	if l.opts.Cost != nil {
		cost = l.opts.Cost(r)
	}

	// The pooled Levels still refer to an earlier request's keys until the
	// checker overwrites them: bounded, and the pool is emptied by the GC.
	d := &sc.d
	*d = policy.Decision{Levels: d.Levels[:0]}
	rq := new(request)
	rq.ctx.init(r.Context(), l.timeout)
	err = l.checker.Decide(&rq.ctx, sc.query(policy.Acquire, path, cost), d)
	rq.ctx.release()
	if err != nil {
		putScratch(sc)
		l.failed(w, r, next, err)
		return
	}
	if l.opts.OnDecision != nil {
		l.opts.OnDecision(r, d)
	}
	if d.Allowed && d.Delay > 0 && !l.wait(r, sc, d) {
		putScratch(sc)
		return
	}
	l.setHeaders(w.Header(), d, &rq.value)
	if !d.Allowed {
		l.opts.OnLimited(w, r, d)
		putScratch(sc)
		return
	}
	if d.Permit != 0 {
		h, hr := l.hold(r, path, d)
		putScratch(sc)
		defer h.release(r) // also when next panics
		next.ServeHTTP(w, hr)
		return
	}
	putScratch(sc)
	next.ServeHTTP(w, r)
}

// wait holds an allowed request for its decision's Delay. It reports
// false when the client went away meanwhile (nothing is answered); when
// MaxWaiting requests are already held it makes d a denial, to be retried
// after the delay, and reports true. Either way the units go back.
func (l *Middleware) wait(r *http.Request, sc *scratch, d *policy.Decision) bool {
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		l.undo(r, sc)
		d.Withdraw()
		return true
	}
	defer l.waiting.Add(-1)
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		l.undo(r, sc)
		return false
	}
}

// undo gives back the units the allowed check of sc's query took, within
// the check's timeout, whether or not the client is still there.
func (l *Middleware) undo(r *http.Request, sc *scratch) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.timeout)
	defer cancel()
	sc.q.Op = policy.GiveBack
	if err := l.checker.Decide(ctx, &sc.q, &policy.Decision{}); err != nil {
		l.logFailure(r, err)
	}
}

func putScratch(sc *scratch) {
	if cap(sc.d.Levels) > 64 {
		return // an outsized decision: let it go
	}
	sc.path = [8]string{}
	if len(sc.q.Paths) > 0 {
		pq := &sc.q.Paths[0]
		clear(pq.Match.Hits)
		*pq = policy.PathQuery{Match: policy.Match{Hits: pq.Match.Hits[:0]}}
	}
	scratches.Put(sc)
}

// failed handles a failed check.
func (l *Middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if r.Context().Err() != nil {
		return // the client is gone: nobody to answer
	}
	if errors.Is(err, store.ErrBadRequest) {
		l.opts.OnBadRequest(w, r, err)
		return
	}
	l.storeErrors.Add(1)
	l.logFailure(r, err)
	if l.opts.OnStoreError != nil {
		l.opts.OnStoreError(r, err)
	}
	if l.opts.Failure == FailClosed {
		Unavailable(w, r)
		return
	}
	next.ServeHTTP(w, r)
}

// logFailure logs a store failure, at most once a second, reporting how
// many were left out since the last line.
func (l *Middleware) logFailure(r *http.Request, err error) {
	unlogged, ok := l.logEvery.Allow(time.Now())
	if !ok {
		return
	}
	lg := l.opts.Logger
	if lg == nil {
		lg = slog.Default()
	}
	policy := "fail-open"
	if l.opts.Failure == FailClosed {
		policy = "fail-closed"
	}
	lg.LogAttrs(r.Context(), slog.LevelError, "httplimit: rate-limit check failed",
		slog.String("policy", policy),
		slog.String("error", err.Error()),
		slog.Uint64("unlogged", unlogged),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path))
}
