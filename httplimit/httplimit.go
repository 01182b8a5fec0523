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
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/answer"
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
	// Path maps a request and its key to the policy path, by appending its
	// segments to path (which is empty, with room for 8 segments, so that
	// appending usually allocates nothing). Segments are used as they are:
	// the policy's key layer escapes them. Nil means the path with the key
	// alone.
	Path func(r *http.Request, key string, path []string) []string
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
	logEvery    ratelog.Every // store errors of scripts and releases: one line a second
	pipe        answer.Pipeline
}

// Waiting returns how many requests the Middleware holds for a policy's
// delay now.
func (l *Middleware) Waiting() int64 { return l.pipe.Waiting.Load() }

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
	p := &l.pipe
	p.Timeout, p.FailOpen, p.Log = l.timeout, opts.Failure == FailOpen, opts.Logger
	p.MaxWaiting = int64(max(opts.MaxWaiting, 0))
	if opts.MaxWaiting == 0 {
		p.MaxWaiting = defaultMaxWaiting
	}
	p.Checker = l.checker
	if opts.OnDecision != nil {
		p.Decided = func(c *answer.Call) { opts.OnDecision(c.Request, &c.Decision) }
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

func (l *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := l.opts.Key(r)
	if err != nil {
		l.opts.OnBadRequest(w, r, err)
		return
	}
	c := answer.Get("middleware")
	defer c.Put()
	c.Query.Paths = c.Query.Paths[:1]
	pq := &c.Query.Paths[0]
	pq.Path, pq.Cost = append(c.Path, key), 1
	if l.opts.Path != nil {
		pq.Path = l.opts.Path(r, key, c.Path)
	}
	if l.opts.Cost != nil {
		pq.Cost = l.opts.Cost(r)
	}
	c.Request, c.Query.Op, c.Wait = r, policy.Acquire, true
	l.pipe.Answer(r.Context(), c)
	switch {
	case c.Gone:
		return
	case c.Status == http.StatusBadRequest:
		l.opts.OnBadRequest(w, r, c.Err)
		return
	case c.Failed:
		l.storeFailed(w, r, next, c.Err)
		return
	}
	c.SetHeader(w.Header(), l.opts.Headers == DraftHeaders, l.opts.Headers == LegacyHeaders)
	if d := &c.Decision; !d.Allowed {
		l.opts.OnLimited(w, r, d)
		return
	} else if d.Permit != 0 {
		h, hr := l.hold(r, pq.Path, d)
		defer h.release(r) // also when next panics
		r = hr
	}
	next.ServeHTTP(w, r)
}

// failed handles a failed script.
func (l *Middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if r.Context().Err() != nil {
		return // the client is gone: nobody to answer
	}
	if errors.Is(err, store.ErrBadRequest) {
		l.opts.OnBadRequest(w, r, err)
		return
	}
	l.logFailure(r, err)
	l.storeFailed(w, r, next, err)
}

// storeFailed counts a failed check and answers it by Options.Failure.
func (l *Middleware) storeFailed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	l.storeErrors.Add(1)
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
