package store

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// MaxKeyLen is the longest key a store accepts, in bytes.
const MaxKeyLen = 512

// ErrBadRequest is wrapped by every error about a request: its key, plan,
// cost, time or tag (a limit's own errors, from algo.Compile, wrap
// algo.ErrInvalid).
var ErrBadRequest = errors.New("bad request")

// A Store applies decisions atomically: concurrent decisions on one key
// behave as if they ran one after another. Decide and DecideAll read
// their requests (the slice and its plans) only during the call, so that
// a caller may reuse them once it returns.
type Store interface {
	// Decide applies one decision. An invalid request returns an error
	// wrapping ErrBadRequest; a store failure returns an
	// error within the context's deadline.
	Decide(ctx context.Context, req Request) (algo.Result, error)
	// DecideAll applies the requests as one all-or-nothing decision at one
	// time (the first request's Time): every request is checked, and the
	// costs are recorded only if every request that is not Shadow is
	// allowed; it reports whether they were. results[i] is request i's
	// result; a request that was allowed but not recorded (another one
	// denied) reports its state without the cost, as a peek would. A
	// denied uniform sliding log still records its attempt, and in a batch
	// of several requests a nary sliding log acts as binary (all or
	// nothing, see algo.InBatch); a batch of one is Decide.
	DecideAll(ctx context.Context, reqs []Request, results []algo.Result) (bool, error)
	// Close releases the store's resources.
	Close() error
}

// Request is one decision.
type Request struct {
	// Key names the state the decision reads and writes. Stores use it
	// verbatim (the Redis store escapes it under its prefix), so any string
	// names exactly one state; use Key to build keys from several parts.
	Key string
	// Plan is the limit, compiled (algo.Compile): compile once where the
	// limit is known, decide many times.
	Plan *algo.Plan
	// Cost is how much the decision consumes; 0 peeks and admits nothing.
	// It is at most algo.MaxCount; a cost above the limit is denied with
	// RetryAfter algo.Never.
	Cost int64
	// Time is the time of the decision; the zero Time means the store's
	// clock (Redis TIME for the Redis store), like the t of
	// golang.org/x/time/rate's AllowN(t, n) when set.
	Time time.Time
	// Tag, when set, places the key for Redis Cluster: keys with the same
	// Tag share one hash slot, so one script can read and write them all.
	// Tag must be a prefix of Key, and a Key must always come with the same
	// Tag. Stores that have no hash slots ignore it.
	Tag string
	// Shadow marks a request of a DecideAll whose denial is reported but
	// does not block the others: a shadow limit being rolled out.
	Shadow bool
	// Stop, on a request whose plan has a debt (algo.Debt), records its
	// admitted cost only when every request of the DecideAll is allowed,
	// Shadow ones too; a denied cost it records in full, as any debt does
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	// Without it a debt's cost is recorded whatever the others decide,
	// each request in its order, so that a key twice in one DecideAll
	// answers each with the count after its own cost.
	Stop bool
	// Lease lets a store that keeps leased quota (the Redis store with
	// Options.LeaseFor) admit the request from units it took ahead for the
	// key, without a round trip; only a fixed-window limit on the store's
	// clock (Time zero) is leased. The window never admits more than its
	// limit; see store/redis for the bounds. Stores without leases ignore
	// it.
	Lease bool
	// Global makes a fixed-window limit one limit across regions: a store
	// with a home (the Redis store's Options.Home) admits it only from its
	// region's share of the window, charged at home first; a store
	// without one is its own home and decides it as any limit.
	Global bool
	// Watch, when above 0, makes the request a node's escalation
	// (policy's escalate), which counts what the Watch requests after it
	// in a DecideAll do: each that starts a block (with WatchDenials,
	// each that denies), unless Shadow. Its plan is a fixed window with a
	// block and its Cost 0: in the check it is a peek, which only its
	// block denies; after the others it is decided at cost 1 per event,
	// whatever the batch decided, and the one its window denies starts its
	// block, all in the same atomic step.
	Watch int
	// WatchDenials makes Watch count denials rather than blocks.
	WatchDenials bool
}

// An Allower is a Store that can decide without a Request or a returned
// Result: with r nil it reports a decision's admission alone, and so skips
// computing the rest of its Result (Limiter.AllowN); with r it fills *r in
// place (a Permit's acquire). The memory store is one.
type Allower interface {
	// AllowN applies Request{Key: key, Plan: p, Cost: n, Time: t} as
	// Decide does, sets *r to its Result unless r is nil, and reports
	// Result.Allowed.
	AllowN(ctx context.Context, key string, p *algo.Plan, t time.Time, n int64, r *algo.Result) (bool, error)
}
