// Package answer answers a call to decide, whichever front end decoded
// it: the httplimit middleware, and the service's HTTP check,
// forward-auth and Envoy's gRPC. Each is a codec around one Pipeline:
// it decodes its call into a Call, has the Pipeline answer it, and
// encodes the answer. The Pipeline sets the store's deadline (once per
// call), asks policy, applies on_store_error to a store failure (counted
// and logged once), waits out a policy's delay and gives a call's units
// back when it cannot wait, and fills in the status; the Call
// writes the RateLimit fields, Retry-After and the problem+json bodies.
package answer

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// A Pipeline answers calls; it is safe for concurrent use.
type Pipeline struct {
	// Checker decides, with policy's one verb: a *policy.Checker, or any
	// checker of the middleware's. It is the one place the pipeline
	// calls policy.
	Checker interface {
		Decide(ctx context.Context, q *policy.Query, d *policy.Decision) error
	}
	// Timeout bounds each decision, store round trip included, from the
	// checker's first look at its context (deadlineCtx); a context's
	// earlier deadline comes first.
	Timeout time.Duration
	// FailOpen is what a store failure answers: allowed, without
	// RateLimit fields (true), or 503 with Retry-After: 1.
	FailOpen bool
	// MaxWaiting bounds the calls waiting at once for a policy's delay
	// (Call.Wait): the next is answered at once as denied, its units
	// given back.
	MaxWaiting int64
	// Log receives store failures, at most a line a second; nil is
	// slog.Default().
	Log *slog.Logger
	// StoreFailed, if set, is told of each store failure, the decision's
	// or a give-back's: a place to count them.
	StoreFailed func(c *Call, err error)
	// Decided, if set, is told of each decision the store made, before
	// any wait for its delay.
	Decided func(c *Call)
	// Delayed, if set, is told of each call that waits for a delay, or
	// (refused) would have waited beyond MaxWaiting.
	Delayed func(c *Call, refused bool)
	// Timed: each call's Took is measured (a clock read either side of
	// the decision).
	Timed bool
	// Waiting counts the calls waiting for a delay now.
	Waiting atomic.Int64

	errLog ratelog.Every
}

// A Call is one call to decide, as a front end decoded it, and its
// answer. Get one from Get and give it back with Put: its buffers are
// reused.
type Call struct {
	// API names the front end, for metrics and logs: "http", "grpc",
	// "forward_auth", "middleware".
	API string
	// Query holds the paths to decide together, all or nothing, and what
	// to do with them (its Op).
	Query policy.Query
	// Wait: the caller waits out a policy's delay here before it is
	// answered allowed (gRPC, forward-auth, the middleware); else the
	// answer carries the delay (the HTTP check's delay_ns).
	Wait bool
	// Request is the middleware's request: the line logged if the store
	// fails names its method and path.
	Request *http.Request

	// The answer. Decision is the policy's, or on_store_error's when the
	// store failed (Failed, Err); Err is also a bad request's error
	// (Status 400). Gone: the caller went away, and is answered nothing.
	Decision policy.Decision
	Status   int
	Err      error
	Failed   bool
	Gone     bool
	// Took is how long the decision took (Pipeline.Timed).
	Took time.Duration

	// Scratch the front ends reuse: a header, a buffer, the body, a path
	// and several paths, a URI's segments.
	Header http.Header
	Buf    []byte
	Body   []byte
	Path   []string
	Paths  [][]string
	Segs   []string

	path [8]string
	one  [1]policy.PathQuery
	own  *owned
}

// owned is what a call needs that cannot be pooled, in one allocation:
// the checker's context (which a misbehaving checker could keep), and the
// backing array of the header values (which the answer's header map
// keeps, and the middleware's next handler with it).
type owned struct {
	ctx  deadlineCtx
	vals [6]string
}

var calls = sync.Pool{New: func() any { return new(Call) }}

// Get returns an empty Call of api. Its Query has no path, and room for
// paths whose Hits keep their capacity (slices.Grow(c.Query.Paths, n)[:n]);
// its Path has room for 8 segments.
func Get(api string) *Call {
	c := calls.Get().(*Call)
	c.API = api
	if c.Path == nil {
		c.Path, c.Query.Paths = c.path[:0], c.one[:0]
	}
	return c
}

// Put gives c back for reuse; nothing of it may be used after.
func (c *Call) Put() {
	if cap(c.Decision.Levels) > 64 {
		return // an outsized decision: let it go
	}
	paths := c.Query.Paths
	for i := range paths {
		clear(paths[i].Match.Hits)
		paths[i] = policy.PathQuery{Match: policy.Match{Hits: paths[i].Match.Hits[:0]}}
	}
	clear(c.Path[:cap(c.Path)])
	clear(c.Paths)
	clear(c.Header)
	c.Query = policy.Query{Paths: paths[:0]}
	c.Decision = policy.Decision{Levels: c.Decision.Levels[:0]}
	c.API, c.Request, c.Wait, c.own = "", nil, false, nil
	c.Status, c.Err, c.Failed, c.Gone, c.Took = 0, nil, false, false, 0
	c.Buf, c.Body, c.Path, c.Paths, c.Segs = c.Buf[:0], c.Body[:0], c.Path[:0], c.Paths[:0], c.Segs[:0]
	calls.Put(c)
}

// Answer decides c and fills in its answer: the Decision and Status (200,
// 429, 403; 400 for a bad request, with Err; 503 when the store failed
// and FailOpen is false), after waiting out a delay when c.Wait. When the
// caller has gone (ctx is done), before or during, c.Gone is set and
// nothing is decided, or what was taken for a delay is given back.
func (p *Pipeline) Answer(ctx context.Context, c *Call) {
	if ctx.Err() != nil {
		c.Gone = true // decide nothing the caller would not hear of
		return
	}
	c.Decision.Levels = c.Decision.Levels[:0]
	c.own = new(owned)
	dc := &c.own.ctx
	dc.init(ctx, p.Timeout)
	var start time.Time
	if p.Timed {
		start = time.Now()
	}
	err := p.Checker.Decide(dc, &c.Query, &c.Decision)
	if p.Timed {
		c.Took = time.Since(start)
	}
	dc.release()
	switch {
	case err == nil:
	case isBadRequest(err):
		c.Err, c.Status = err, http.StatusBadRequest
		return
	case ctx.Err() != nil:
		c.Err, c.Gone = err, true
		return
	default:
		p.storeFailed(ctx, c, err)
		c.Err, c.Failed = err, true
		matched := true
		for i := range c.Query.Paths {
			matched = matched && !c.Query.Paths[i].Match.Unmatched
		}
		c.Decision = policy.Decision{Levels: c.Decision.Levels[:0], Matched: matched, Allowed: p.FailOpen}
		c.Decision.Summary.Allowed = p.FailOpen
		if !p.FailOpen {
			c.Decision.Summary.RetryAfter = time.Second
		}
	}
	if p.Decided != nil && !c.Failed {
		p.Decided(c)
	}
	if c.Wait && c.Decision.Allowed && c.Decision.Delay > 0 && !p.wait(ctx, c) && ctx.Err() != nil {
		c.Gone = true // and the units are back
		return
	}
	c.Status = status(&c.Decision, c.Failed)
}

// isBadRequest reports whether a decision's error is the request's fault.
func isBadRequest(err error) bool {
	return errors.Is(err, store.ErrBadRequest) || errors.Is(err, algo.ErrInvalid)
}

// storeFailed counts a store failure (StoreFailed) and logs it, at most a
// line a second with how many were left out.
func (p *Pipeline) storeFailed(ctx context.Context, c *Call, err error) {
	if p.StoreFailed != nil {
		p.StoreFailed(c, err)
	}
	n, ok := p.errLog.Allow(time.Now())
	if !ok {
		return
	}
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	answer := "fail-closed"
	if p.FailOpen {
		answer = "fail-open"
	}
	attrs := []slog.Attr{slog.String("api", c.API), slog.String("policy", answer),
		slog.String("error", err.Error()), slog.Uint64("unlogged", n)}
	if r := c.Request; r != nil {
		attrs = append(attrs, slog.String("method", r.Method), slog.String("path", r.URL.Path))
	}
	log.LogAttrs(ctx, slog.LevelError, "rate-limit check failed: the store failed", attrs...)
}

// A policy node with a delay admits a request that would be denied, its
// units reserved, and says how long to wait (policy.Decision.Delay). A
// Call with Wait waits here before it is answered allowed (so that an
// Envoy, nginx, Caddy or Traefik in front keeps the request waiting), at most
// MaxWaiting at once: beyond them a delayed call is refused at once. A
// caller that goes away, or whose deadline comes before the delay ends,
// gets its units back.

// wait waits out c's delay. It reports whether the caller may go on; when
// it may not, it has given the units back and made the decision a
// denial: ctx ended first (or its deadline is before the delay's end), or
// MaxWaiting calls are already waiting.
func (p *Pipeline) wait(ctx context.Context, c *Call) bool {
	d := &c.Decision
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.Delay {
		p.giveBack(ctx, c)
		return false
	}
	if p.Waiting.Add(1) > p.MaxWaiting {
		p.Waiting.Add(-1)
		if p.Delayed != nil {
			p.Delayed(c, true)
		}
		p.giveBack(ctx, c)
		return false
	}
	defer p.Waiting.Add(-1)
	if p.Delayed != nil {
		p.Delayed(c, false)
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		p.giveBack(ctx, c)
		return false
	}
}

// giveBack undoes what c's allowed decision took, within the timeout
// whether or not the caller is still there, and makes it a denial to be
// retried after its delay.
func (p *Pipeline) giveBack(ctx context.Context, c *Call) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Timeout)
	defer cancel()
	op := c.Query.Op
	c.Query.Op = policy.GiveBack
	if err := p.Checker.Decide(gctx, &c.Query, &policy.Decision{}); err != nil {
		p.storeFailed(ctx, c, err)
	}
	c.Query.Op = op
	c.Decision.Withdraw()
}

// deadlineCtx is context.WithTimeout(parent, timeout) made lazily. The
// deadline is fixed when the checker first consults the context (Deadline,
// Done or Err), and the real context (a timer and a channel, three
// allocations) is made only when someone asks for Done. A checker that
// never blocks, such as one on the memory store, never asks, so bounding
// it costs nothing, not even a clock read; one that
// waits on the network, such as the Redis store, asks before it waits and
// gets an ordinary deadline context. The timeout so runs from the
// checker's first look at the context, which for the sluice checkers is
// when they call the store, microseconds into the check.
//
// What it pays: bench/NOTES.md, "What each micro-optimisation pays";
// answer_test.go holds it to WithTimeout's answers.
//
// It lives inside a per-request allocation and is never reused, so a
// checker that keeps it past Check (it should not) sees a cancelled
// context rather than another request's.
type deadlineCtx struct {
	parent  context.Context
	timeout time.Duration

	mu       sync.Mutex
	deadline int64           // Unix ns; 0 until first needed
	inner    context.Context // nil until Done is called
	cancel   context.CancelFunc
	done     bool // release was called: Err reports Canceled
}

func (c *deadlineCtx) init(parent context.Context, timeout time.Duration) {
	c.parent, c.timeout = parent, timeout
}

// deadlineLocked fixes the deadline on first use; c.mu is held.
func (c *deadlineCtx) deadlineLocked() time.Time {
	if c.deadline == 0 {
		d := time.Now().Add(c.timeout)
		if pd, ok := c.parent.Deadline(); ok && pd.Before(d) {
			d = pd
		}
		c.deadline = d.UnixNano()
	}
	return time.Unix(0, c.deadline)
}

// release cancels the context once the check is over.
func (c *deadlineCtx) release() {
	c.mu.Lock()
	c.done = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadlineLocked(), true
}

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if d, ok := c.parent.Deadline(); ok && !d.After(c.deadlineLocked()) {
			// The parent's deadline comes first: its end is the end, and
			// the caller sees the parent done, not a deadline of ours.
			c.inner, c.cancel = context.WithCancel(c.parent)
		} else {
			c.inner, c.cancel = context.WithDeadline(c.parent, c.deadlineLocked())
		}
		if c.done {
			c.cancel()
		}
	}
	return c.inner.Done()
}

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	inner, done, deadline := c.inner, c.done, c.deadlineLocked()
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	if done {
		return context.Canceled
	}
	return nil
}

// Value answers from the real context once it exists, so that
// context.Cause and the cancellation of derived contexts (which find their
// parent's cancelCtx through Value) see it; before that, from the parent.
func (c *deadlineCtx) Value(key any) any {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return c.parent.Value(key)
}
