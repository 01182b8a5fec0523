// Package sluice is a rate limiter with one decision API over several
// algorithms (package algo) and several stores: an embedded in-memory store
// (package store/memory) and Redis (package store/redis), which give the
// same answers for the same traces.
//
// A decision names a key, a limit and a cost:
//
//	st := memory.New()
//	res, err := st.Decide(ctx, sluice.Request{
//		Key:   "user:alex",
//		Limit: algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
//		Cost:  1,
//	})
package sluice

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// MaxKeyLen is the longest key a store accepts, in bytes.
const MaxKeyLen = 512

// ErrBadRequest is wrapped by every error about a request's key, cost or
// time (limit errors wrap algo.ErrInvalid).
var ErrBadRequest = errors.New("bad request")

// A Store applies decisions atomically: concurrent decisions on one key
// behave as if they ran one after another.
type Store interface {
	// Decide applies one decision. An invalid request returns an error
	// wrapping ErrBadRequest or algo.ErrInvalid; a store failure returns an
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
	// nothing, see algo.Plan.Batched); a batch of one is Decide.
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
	// Limit is the limiter definition.
	Limit algo.Limit
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
	// Tag. Stores that have no slots ignore it.
	Tag string
	// Shadow marks a request of a DecideAll whose denial is reported but
	// does not block the others: a shadow limit being rolled out.
	Shadow bool
	// Lease lets a store that keeps leased quota (the Redis store with
	// Options.LeaseFor) admit the request from units it took ahead for the
	// key, without a round trip; only a fixed-window limit on the store's
	// clock (Time zero) is leased. The window never admits more than its
	// limit; see store/redis for the bounds. Stores without leases ignore
	// it.
	Lease bool
}

// Key joins parts with ':' after escaping each part, so that distinct part
// lists always give distinct keys: '%', ':', '#', '{' and '}' in a part are
// percent-encoded ('#' is left free to separate a key from a limit index). A caller id such as "alex:trade" or "{alex}" can
// therefore never produce another caller's key or choose a Redis Cluster
// hash tag.
func Key(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(Escape(p))
	}
	return b.String()
}

// Escape percent-encodes '%', ':', '#', '{' and '}' in s. It returns s itself
// when there is nothing to escape.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', ':', '#', '{', '}':
			const hex = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// needsEscape reports whether s holds a byte Escape encodes; a loop over
// the bytes, where strings.ContainsAny takes a slower general path.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%', ':', '#', '{', '}':
			return true
		}
	}
	return false
}

// Cell renders r as the reply of redis-cell's CL.THROTTLE: limited (0 or 1),
// limit, remaining, retry-after and reset-after in whole seconds. Retry-after
// is -1 when allowed or never; times round up to the next second only when
// the fraction is at least 1ms, as redis-cell does.
func Cell(r algo.Result) [5]int64 {
	limited, retry := int64(1), int64(-1)
	if r.Allowed {
		limited = 0
	} else if r.RetryAfter != algo.Never {
		retry = cellSeconds(r.RetryAfter)
	}
	return [5]int64{limited, r.Quota, r.Remaining, retry, cellSeconds(r.ResetAfter)}
}

func cellSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second >= time.Millisecond {
		s++
	}
	return s
}
