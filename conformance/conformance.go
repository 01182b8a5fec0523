// Package conformance holds the traces every Sluice store must pass with
// identical results. A trace is a sequence of decisions at explicit times,
// each with the result the algorithm's definition gives by hand.
package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// T0 is the start time of every trace: the t_ns of the README's replay
// example, in µs.
var T0 = time.UnixMicro(1800003000334587)

// Step is one decision of a trace and the result it must give.
type Step struct {
	At   time.Duration // since T0
	Key  string        // "k" when empty
	Cost int64
	// Permit and Op, on a concurrency limit, make the step decide Op for
	// the permit id Permit (algo.ForPermit); left zero, it acquires
	// for no permit.
	Permit int64
	Op     algo.SlotOp
	Want   algo.Result
}

// Trace is a named sequence of decisions on one limit.
type Trace struct {
	Name  string
	Limit algo.Limit
	Steps []Step
}

const (
	s  = time.Second
	ms = time.Millisecond
	us = time.Microsecond
)

// Traces are the hand-checked traces, one table per algorithm.
var Traces = []Trace{
	{
		// CL.THROTTLE user123 15 30 60: T = 2s, tau = 32s, limit 16.
		Name:  "gcra/redis-cell",
		Limit: algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 14, ResetAfter: 3 * s}},
			{At: 1 * s, Key: "peek", Cost: 0, Want: algo.Result{Allowed: true, Quota: 16, Remaining: 16}},
			{At: 1 * s, Key: "peek", Cost: 0, Want: algo.Result{Allowed: true, Quota: 16, Remaining: 16}},
			{At: 0, Key: "full", Cost: 16, Want: algo.Result{Allowed: true, Admitted: 16, Quota: 16, Remaining: 0, ResetAfter: 32 * s}},
			{At: 0, Key: "full", Cost: 1, Want: algo.Result{Allowed: false, Quota: 16, Remaining: 0, RetryAfter: 2 * s, ResetAfter: 32 * s}},
			{At: 0, Key: "full", Cost: 0, Want: algo.Result{Allowed: true, Quota: 16, Remaining: 0, ResetAfter: 32 * s}},
			{At: 3 * s, Key: "full", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 0, ResetAfter: 31 * s}},
			{At: 3 * s, Key: "full", Cost: 2, Want: algo.Result{Allowed: false, Quota: 16, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 31 * s}},
			{At: 0, Key: "over", Cost: 17, Want: algo.Result{Allowed: false, Quota: 16, Remaining: 16, RetryAfter: algo.Never}},
			{At: 40 * s, Key: "full", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 500 * time.Millisecond, Key: "half", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 1500 * time.Millisecond, Key: "half", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 16, Remaining: 14, ResetAfter: 3 * s}},
		},
	},
	{
		// 10 tokens, 5 per second: T = 200ms, tau = 2s.
		Name:  "token_bucket",
		Limit: algo.TokenBucket{Burst: 10, Count: 5, Period: time.Second},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 10, Remaining: 9, ResetAfter: 200 * time.Millisecond}},
			{At: 0, Cost: 9, Want: algo.Result{Allowed: true, Admitted: 9, Quota: 10, Remaining: 0, ResetAfter: 2 * s}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: false, Quota: 10, Remaining: 0, RetryAfter: 200 * time.Millisecond, ResetAfter: 2 * s}},
			{At: 500 * time.Millisecond, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 10, Remaining: 0, ResetAfter: 1900 * time.Millisecond}},
			{At: 500 * time.Millisecond, Cost: 11, Want: algo.Result{Allowed: false, Quota: 10, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 1900 * time.Millisecond}},
			{At: 500 * time.Millisecond, Key: "fresh", Cost: 10, Want: algo.Result{Allowed: true, Admitted: 10, Quota: 10, Remaining: 0, ResetAfter: 2 * s}},
			{At: 10 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 10, Remaining: 10}},
		},
	},
	{
		// 3 per 10s window; T0 lies 0.334587s into its window.
		Name:  "fixed_window",
		Limit: algo.FixedWindow{Count: 3, Window: 10 * s},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 1, ResetAfter: 9665413 * time.Microsecond}},
			{At: 1 * s, Cost: 2, Want: algo.Result{Allowed: false, Quota: 3, Remaining: 1, RetryAfter: 8665413 * time.Microsecond, ResetAfter: 8665413 * time.Microsecond}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 8665413 * time.Microsecond}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 0, ResetAfter: 8665413 * time.Microsecond}},
			{At: 9665413 * time.Microsecond, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 10 * s}},
			{At: 9665413 * time.Microsecond, Cost: 4, Want: algo.Result{Allowed: false, Quota: 3, Remaining: 2, RetryAfter: algo.Never, ResetAfter: 10 * s}},
			{At: 9665413 * time.Microsecond, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: 30 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 3}},
			{At: 30 * s, Key: "fresh", Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 9665413 * time.Microsecond}},
		},
	},
	{
		// A window that admits nothing (Envoy's requests_per_unit 0):
		// every cost is denied, Never to be admitted; a peek is allowed.
		Name:  "fixed_window/deny-all",
		Limit: algo.FixedWindow{Count: 0, Window: s},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: false, Quota: 0, Remaining: 0, RetryAfter: algo.Never}},
			{At: 0, Cost: 0, Want: algo.Result{Allowed: true, Quota: 0, Remaining: 0}},
			{At: 5 * s, Cost: 1, Want: algo.Result{Allowed: false, Quota: 0, Remaining: 0, RetryAfter: algo.Never}},
		},
	},
	{
		Name:  "gate",
		Limit: algo.Gate{Interval: 5 * s},
		Steps: []Step{
			{At: 0, Cost: 0, Want: algo.Result{Allowed: true, Quota: 1, Remaining: 1}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: 5 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: false, Quota: 1, Remaining: 0, RetryAfter: 4 * s, ResetAfter: 4 * s}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 1, Remaining: 0, ResetAfter: 4 * s}},
			{At: 5 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: 5 * s}},
			{At: 5 * s, Cost: 2, Want: algo.Result{Allowed: false, Quota: 1, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 5 * s}},
			{At: 60 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: 5 * s}},
		},
	},
	{
		// 3 per 10s and 2 per 1s, at least 100ms apart.
		Name:  "sliding_log/binary",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: 10 * s}, {Count: 2, Window: s}}, MinGap: 100 * ms},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: 10 * s}},
			// Too close: waits for the gap.
			{At: 50 * ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: 1, RetryAfter: 50 * ms, ResetAfter: 9950 * ms, DeniedBy: algo.DeniedByGap}},
			{At: 100 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: 10 * s}},
			// 2 in the last second: the action at 0 leaves it at 1s.
			{At: 300 * ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: 700 * ms, ResetAfter: 9800 * ms, DeniedBy: 2}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: 10 * s}},
			// A cost of 2 needs the 10s limit's 2nd newest (at 100ms) gone.
			{At: 1 * s, Cost: 2, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: 9100 * ms, ResetAfter: 10 * s, DeniedBy: 1}},
			{At: 1 * s, Cost: 3, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 10 * s, DeniedBy: 2}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 2, Remaining: 0, ResetAfter: 10 * s}},
			// Retrying the cost after its wait succeeds.
			{At: 10100 * ms, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 2, Remaining: 0, ResetAfter: 10 * s}},
			{At: 40 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 2, Remaining: 2}},
		},
	},
	{
		// 5 per 1s, admitting as much of a cost as fits.
		Name:  "sliding_log/nary",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 5, Window: s}}, Mode: algo.Nary},
		Steps: []Step{
			{At: 0, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 5, Remaining: 2, ResetAfter: s}},
			{At: 200 * ms, Cost: 4, Want: algo.Result{Admitted: 2, Quota: 5, Remaining: 0, RetryAfter: s, ResetAfter: s, DeniedBy: 1}},
			{At: 500 * ms, Cost: 1, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 700 * ms, DeniedBy: 1}},
			{At: 1 * s, Cost: 4, Want: algo.Result{Admitted: 3, Quota: 5, Remaining: 0, RetryAfter: s, ResetAfter: s, DeniedBy: 1}},
			{At: 1200 * ms, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 5, Remaining: 0, ResetAfter: s}},
			{At: 1200 * ms, Cost: 6, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: algo.Never, ResetAfter: s, DeniedBy: 1}},
			{At: 0, Key: "big", Cost: 7, Want: algo.Result{Admitted: 5, Quota: 5, Remaining: 0, RetryAfter: algo.Never, ResetAfter: s, DeniedBy: 1}},
		},
	},
	{
		// 2 per 1s, every attempt recorded: hammering keeps the caller out.
		Name:  "sliding_log/uniform",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 2, Window: s}}, Mode: algo.Uniform},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: s}},
			{At: 100 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: s}},
			{At: 200 * ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: -1, RetryAfter: 900 * ms, ResetAfter: s, DeniedBy: 1}},
			{At: 1100 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: s}},
			{At: 1150 * ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: -1, RetryAfter: 950 * ms, ResetAfter: s, DeniedBy: 1}},
			{At: 1500 * ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: -1, RetryAfter: 650 * ms, ResetAfter: s, DeniedBy: 1}},
			{At: 2150 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: s}},
			// A cost over the limit is recorded as at most 2.
			{At: 2150 * ms, Cost: 3, Want: algo.Result{Quota: 2, Remaining: -2, RetryAfter: algo.Never, ResetAfter: s, DeniedBy: 1}},
		},
	},
	{
		// 4 per 1s in 4 buckets of 250ms; T0 is 84.587ms into its bucket
		// b, which counts until (b+5)·250ms = T0 + 1165.413ms.
		Name:  "sliding_log/buckets",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 4, Window: s}}, Buckets: 4},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 4, Remaining: 2, ResetAfter: 1165413 * us}},
			{At: 500 * ms, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 4, Remaining: 0, ResetAfter: 1165413 * us}},
			// An exact log would admit at 1s; the sampled one waits for the bucket.
			{At: 1 * s, Cost: 1, Want: algo.Result{Quota: 4, Remaining: 0, RetryAfter: 165413 * us, ResetAfter: 665413 * us, DeniedBy: 1}},
			{At: 1165413 * us, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 4, Remaining: 1, ResetAfter: 1250 * ms}},
		},
	},
	{
		// 3 per 2s in 2 buckets of 1s, 500ms apart, every attempt recorded.
		Name:  "sliding_log/buckets-uniform-gap",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: 2 * s}}, Buckets: 2, MinGap: 500 * ms, Mode: algo.Uniform},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 2665413 * us}},
			// Too close: recorded, and the gap counts from it.
			{At: 200 * ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 1, RetryAfter: 500 * ms, ResetAfter: 2465413 * us, DeniedBy: algo.DeniedByGap}},
			{At: 700 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 2965413 * us}},
			{At: 1500 * ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: -1, RetryAfter: 1165413 * us, ResetAfter: 2165413 * us, DeniedBy: 1}},
			{At: 2665413 * us, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 3 * s}},
		},
	},
	{
		// At most 3 in the last 1s, 4 in 3s, 5 in 5s, in 1s slices; T0 is
		// 334.587ms into its slice c, which leaves the 1s window at
		// T0 + 665.413ms.
		Name: "window_counter",
		Limit: algo.WindowCounter{Limits: []algo.Window{
			{Count: 3, Window: s}, {Count: 4, Window: 3 * s}, {Count: 5, Window: 5 * s}}},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 1, ResetAfter: 4665413 * us}},
			{At: 500 * ms, Cost: 2, Want: algo.Result{Quota: 3, Remaining: 1, RetryAfter: 165413 * us, ResetAfter: 4165413 * us, DeniedBy: 1}},
			{At: 665413 * us, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 0, ResetAfter: 5 * s}},
			{At: 1665413 * us, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: s, ResetAfter: 4 * s, DeniedBy: 2}},
			{At: 2665413 * us, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 5 * s}},
			{At: 2665413 * us, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 2 * s, ResetAfter: 5 * s, DeniedBy: 3}},
			{At: 2665413 * us, Cost: 4, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 5 * s, DeniedBy: 1}},
			{At: 30 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 3}},
		},
	},
	// The clock steps back 50ms across a window's end (Redis TIME after a
	// failover to a replica whose clock is behind, a VM restored from a
	// snapshot, NTP): no algorithm admits beyond its limit, and none
	// returns to a window it has left. e = 9.665413s is the end of the
	// 10s window that holds T0. A fixed window decided before the start
	// of the window its key counts is taken at that start (its times
	// count from there); the others decide at the earlier time, which
	// their state already covers.
	{
		Name:  "fixed_window/clock-back",
		Limit: algo.FixedWindow{Count: 3, Window: 10 * s},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 100 * ms}},
			{At: e, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			// Back 50ms, into the window just left: it stays closed.
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 10 * s, ResetAfter: 10 * s}},
			{At: e - 50*ms, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 5 * s, ResetAfter: 5 * s}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 10 * s}},
			// Back 3 windows after a window that admitted once.
			{At: e - 20*s, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: e - 20*s, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 10 * s, ResetAfter: 10 * s}},
		},
	},
	{
		// T = 3.333333s, tau = 6.666666s.
		Name:  "gcra/clock-back",
		Limit: algo.GCRA{Burst: 2, Count: 3, Period: 10 * s},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 9999999 * us}},
			{At: e, Cost: 3, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9899999 * us, ResetAfter: 9899999 * us}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 3283333 * us, ResetAfter: 9949999 * us}},
			{At: e - 50*ms, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 0, ResetAfter: 9949999 * us}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 8233332 * us}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 1, ResetAfter: 6566665 * us}},
		},
	},
	{
		Name:  "token_bucket/clock-back",
		Limit: algo.TokenBucket{Burst: 3, Count: 3, Period: 10 * s},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 9999999 * us}},
			{At: e, Cost: 3, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9899999 * us, ResetAfter: 9899999 * us}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 3283333 * us, ResetAfter: 9949999 * us}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 8233332 * us}},
		},
	},
	{
		Name:  "gate/clock-back",
		Limit: algo.Gate{Interval: 10 * s},
		Steps: []Step{
			{At: e - 100*ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: 10 * s}},
			{At: e, Cost: 1, Want: algo.Result{Quota: 1, Remaining: 0, RetryAfter: 9900 * ms, ResetAfter: 9900 * ms}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 1, Remaining: 0, RetryAfter: 9950 * ms, ResetAfter: 9950 * ms}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Quota: 1, Remaining: 0, RetryAfter: 4900 * ms, ResetAfter: 4900 * ms}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: 10 * s}},
		},
	},
	{
		Name:  "sliding_log/clock-back",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: 10 * s}}},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: e, Cost: 3, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9900 * ms, ResetAfter: 9900 * ms, DeniedBy: 1}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9950 * ms, ResetAfter: 9950 * ms, DeniedBy: 1}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 4900 * ms, ResetAfter: 4900 * ms, DeniedBy: 1}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 10 * s}},
		},
	},
	{
		Name:  "sliding_log/buckets-clock-back",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: 10 * s}}, Buckets: 10},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 10100 * ms}},
			{At: e, Cost: 3, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 10 * s, ResetAfter: 10 * s, DeniedBy: 1}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 10050 * ms, ResetAfter: 10050 * ms, DeniedBy: 1}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 5 * s, ResetAfter: 5 * s, DeniedBy: 1}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 11 * s}},
		},
	},
	{
		Name:  "window_counter/clock-back",
		Limit: algo.WindowCounter{Limits: []algo.Window{{Count: 3, Window: 10 * s}}},
		Steps: []Step{
			{At: e - 100*ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 9100 * ms}},
			{At: e, Cost: 3, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9 * s, ResetAfter: 9 * s, DeniedBy: 1}},
			{At: e - 50*ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 9050 * ms, ResetAfter: 9050 * ms, DeniedBy: 1}},
			{At: e + 5*s, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 4 * s, ResetAfter: 4 * s, DeniedBy: 1}},
			{At: e + 10*s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 10 * s}},
		},
	},
	{
		// 3 slots, 10s holds. Permit 1 takes 2 at 0 (hold to 10s), a
		// plain acquire 1 at 1s (to 11s). ResetAfter is when the last
		// hold the state knows of ends: after permit 1's release at 4s
		// it still counts permit 1's (to 13s), a bound, until a hold
		// ends and the state is swept.
		Name:  "concurrency",
		Limit: algo.Concurrency{Count: 3, HoldFor: 10 * s},
		Steps: []Step{
			{At: 0, Cost: 2, Permit: 1, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 1, ResetAfter: 10 * s}},
			// 2 more need permit 1's hold to end.
			{At: 1 * s, Cost: 2, Permit: 2, Want: algo.Result{Quota: 3, Remaining: 1, RetryAfter: 9 * s, ResetAfter: 9 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			// Permit 1 acquired again (a retry) renews, taking nothing more.
			{At: 2 * s, Cost: 2, Permit: 1, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: 3 * s, Permit: 1, Op: algo.Renew, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			// 1 more waits for the plain holder's hold (11s), the earliest.
			{At: 4 * s, Cost: 1, Permit: 2, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 7 * s, ResetAfter: 9 * s}},
			// A permit never held is never renewed.
			{At: 4 * s, Permit: 9, Op: algo.Renew, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 9 * s}},
			{At: 4 * s, Permit: 1, Op: algo.Release, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 2, ResetAfter: 9 * s}},
			// Released twice: nothing more is freed.
			{At: 4 * s, Permit: 1, Op: algo.Release, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 2, ResetAfter: 9 * s}},
			{At: 4 * s, Permit: 1, Op: algo.Renew, Want: algo.Result{Quota: 3, Remaining: 2, RetryAfter: algo.Never, ResetAfter: 9 * s}},
			{At: 4 * s, Cost: 4, Want: algo.Result{Quota: 3, Remaining: 2, RetryAfter: algo.Never, ResetAfter: 9 * s}},
			{At: 5 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 2, ResetAfter: 8 * s}},
			// At 11s the plain holder's hold has ended: all 3 are free.
			{At: 11 * s, Cost: 3, Permit: 2, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: 12 * s, Cost: 1, Op: algo.Release, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 0, ResetAfter: 9 * s}},
			{At: 25 * s, Cost: 0, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 3}},
			// A release without a permit (Envoy's is_negative_hits) frees
			// plain holders, the earliest hold first, part of one if need
			// be, and never a permit's.
			{At: 0, Key: "plain", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 10 * s}},
			{At: 1 * s, Key: "plain", Cost: 1, Permit: 7, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 1, ResetAfter: 10 * s}},
			{At: 2 * s, Key: "plain", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: 3 * s, Key: "plain", Cost: 5, Op: algo.Release, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 2, ResetAfter: 9 * s}},
			{At: 3 * s, Key: "plain", Cost: 1, Op: algo.Release, Want: algo.Result{Allowed: true, Quota: 3, Remaining: 2, ResetAfter: 9 * s}},
			{At: 3 * s, Key: "plain", Permit: 7, Op: algo.Release, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 3}},
		},
	},
	{
		// The clock steps back 50ms after a hold was taken: holds are
		// times, so the earlier time sees them held, never free.
		Name:  "concurrency/clock-back",
		Limit: algo.Concurrency{Count: 2, HoldFor: 10 * s},
		Steps: []Step{
			{At: 10 * s, Cost: 1, Permit: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: 10 * s}},
			{At: 9950 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: 10050 * ms}},
			{At: 9900 * ms, Cost: 1, Permit: 2, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: 10050 * ms, ResetAfter: 10100 * ms}},
			// The plain hold (to 19.95s) has ended, permit 1's (to 20s) not.
			{At: 19970 * ms, Cost: 2, Permit: 2, Want: algo.Result{Quota: 2, Remaining: 1, RetryAfter: 30 * ms, ResetAfter: 30 * ms}},
			{At: 19970 * ms, Cost: 1, Permit: 2, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: 10 * s}},
			{At: 15 * s, Cost: 1, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: 5 * s, ResetAfter: 14970 * ms}},
		},
	},
	{
		// 2 at once, then 1 an hour, blocking for 10s, each block in a row
		// 3 times longer up to 1m, forgotten 1m after a block ends. A
		// block denies whatever the algorithm says, is not extended by
		// the requests it denies, and its RetryAfter is its end.
		Name: "gcra/block",
		Limit: algo.Blocking{Limit: algo.GCRA{Burst: 1, Count: 1, Period: time.Hour},
			Block: algo.Block{For: 10 * s, Growth: 3, Max: time.Minute, ForgetAfter: time.Minute}},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: time.Hour}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 0, ResetAfter: 2 * time.Hour}},
			// Over: a first block, to 11s.
			{At: 1 * s, Cost: 1, Want: algo.Result{Quota: 2, RetryAfter: 10 * s, ResetAfter: 10 * s, DeniedBy: algo.DeniedByBlock}},
			// During it, denied to its end, a peek too; not extended.
			{At: 5 * s, Cost: 1, Want: algo.Result{Quota: 2, RetryAfter: 6 * s, ResetAfter: 6 * s, DeniedBy: algo.DeniedByBlock}},
			{At: 5 * s, Cost: 0, Want: algo.Result{Quota: 2, RetryAfter: 6 * s, ResetAfter: 6 * s, DeniedBy: algo.DeniedByBlock}},
			// Over again at its end: a second block, 3x.
			{At: 11 * s, Cost: 1, Want: algo.Result{Quota: 2, RetryAfter: 30 * s, ResetAfter: 30 * s, DeniedBy: algo.DeniedByBlock}},
			// A third: 90s, capped at 1m.
			{At: 41 * s, Cost: 1, Want: algo.Result{Quota: 2, RetryAfter: time.Minute, ResetAfter: time.Minute, DeniedBy: algo.DeniedByBlock}},
			// More than a minute after it ended (1m41s): a first block
			// again; a cost above the limit starts one too.
			{At: 162 * s, Cost: 5, Want: algo.Result{Quota: 2, RetryAfter: 10 * s, ResetAfter: 10 * s, DeniedBy: algo.DeniedByBlock}},
			// Another key is not blocked.
			{At: 162 * s, Key: "other", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: time.Hour}},
		},
	},
	{
		// A window's block: 3 per 10s window (T0 0.334587s in), blocking
		// 5s, growth 2, max 8s; forget_after 24h.
		Name:  "fixed_window/block",
		Limit: algo.Blocking{Limit: algo.FixedWindow{Count: 3, Window: 10 * s}, Block: algo.Block{For: 5 * s, Growth: 2, Max: 8 * s}},
		Steps: []Step{
			{At: 0, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: e}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Quota: 3, RetryAfter: 5 * s, ResetAfter: 5 * s, DeniedBy: algo.DeniedByBlock}},
			// The block outlasts nothing of the window: at 6s the window
			// still denies, and the second block is 10s, capped at 8s.
			{At: 6 * s, Cost: 1, Want: algo.Result{Quota: 3, RetryAfter: 8 * s, ResetAfter: 8 * s, DeniedBy: algo.DeniedByBlock}},
			// At 14s the block has ended and a new window has begun.
			{At: 14 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: e + 10*s - 14*s}},
		},
	},
	{
		// A block is a time: a clock stepping back 50ms after one started
		// finds the key blocked, its RetryAfter longer by as much.
		Name:  "gcra/block-clock-back",
		Limit: algo.Blocking{Limit: algo.GCRA{Burst: 0, Count: 1, Period: time.Hour}, Block: algo.Block{For: 10 * s}},
		Steps: []Step{
			{At: 10 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: time.Hour}},
			{At: 11 * s, Cost: 1, Want: algo.Result{Quota: 1, RetryAfter: 10 * s, ResetAfter: 10 * s, DeniedBy: algo.DeniedByBlock}},
			{At: 10950 * ms, Cost: 1, Want: algo.Result{Quota: 1, RetryAfter: 10050 * ms, ResetAfter: 10050 * ms, DeniedBy: algo.DeniedByBlock}},
			// At its end the GCRA still denies: a second block of 10s.
			{At: 21 * s, Cost: 1, Want: algo.Result{Quota: 1, RetryAfter: 10 * s, ResetAfter: 10 * s, DeniedBy: algo.DeniedByBlock}},
		},
	},
	// Each algorithm at its largest limit (algo.MaxCount and the bounds it
	// lists), with costs up to algo.MaxCount: both stores count exactly to
	// the last unit (a fixed window of 2^63-1 once failed open on Redis,
	// its counter overflowing).
	{
		// T = 1µs: the limit spans the whole 100-year horizon.
		Name:  "gcra/edge",
		Limit: algo.GCRA{Burst: maxTAT - 1, Count: 1_000_000, Period: s},
		Steps: []Step{
			{At: 0, Cost: maxTAT - 1, Want: algo.Result{Allowed: true, Admitted: maxTAT - 1, Quota: maxTAT, Remaining: 1, ResetAfter: (maxTAT - 1) * us}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: maxTAT, Remaining: 0, ResetAfter: maxTAT * us}},
			{At: 0, Cost: 1, Want: algo.Result{Quota: maxTAT, Remaining: 0, RetryAfter: us, ResetAfter: maxTAT * us}},
			{At: 1 * ms, Cost: 0, Want: algo.Result{Allowed: true, Quota: maxTAT, Remaining: 1000, ResetAfter: (maxTAT - 1000) * us}},
			{At: 1 * ms, Cost: maxTAT, Want: algo.Result{Quota: maxTAT, Remaining: 1000, RetryAfter: (maxTAT - 1000) * us, ResetAfter: (maxTAT - 1000) * us}},
			{At: 1 * ms, Cost: algo.MaxCount, Want: algo.Result{Quota: maxTAT, Remaining: 1000, RetryAfter: algo.Never, ResetAfter: (maxTAT - 1000) * us}},
		},
	},
	{
		Name:  "token_bucket/edge",
		Limit: algo.TokenBucket{Burst: maxTAT, Count: 1_000_000, Period: s},
		Steps: []Step{
			{At: 0, Cost: maxTAT, Want: algo.Result{Allowed: true, Admitted: maxTAT, Quota: maxTAT, Remaining: 0, ResetAfter: maxTAT * us}},
			{At: 0, Cost: 1, Want: algo.Result{Quota: maxTAT, Remaining: 0, RetryAfter: us, ResetAfter: maxTAT * us}},
			{At: 0, Cost: algo.MaxCount, Want: algo.Result{Quota: maxTAT, Remaining: 0, RetryAfter: algo.Never, ResetAfter: maxTAT * us}},
		},
	},
	{
		Name:  "fixed_window/edge",
		Limit: algo.FixedWindow{Count: algo.MaxCount, Window: 10 * s},
		Steps: []Step{
			{At: 0, Cost: algo.MaxCount - 1, Want: algo.Result{Allowed: true, Admitted: algo.MaxCount - 1, Quota: algo.MaxCount, Remaining: 1, ResetAfter: e}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: algo.MaxCount, Remaining: 0, ResetAfter: e}},
			{At: 0, Cost: 1, Want: algo.Result{Quota: algo.MaxCount, Remaining: 0, RetryAfter: e, ResetAfter: e}},
			{At: 0, Cost: algo.MaxCount, Want: algo.Result{Quota: algo.MaxCount, Remaining: 0, RetryAfter: e, ResetAfter: e}},
			{At: 0, Key: "once", Cost: algo.MaxCount, Want: algo.Result{Allowed: true, Admitted: algo.MaxCount, Quota: algo.MaxCount, Remaining: 0, ResetAfter: e}},
			{At: 0, Key: "once", Cost: 1, Want: algo.Result{Quota: algo.MaxCount, Remaining: 0, RetryAfter: e, ResetAfter: e}},
			{At: e, Key: "once", Cost: algo.MaxCount, Want: algo.Result{Allowed: true, Admitted: algo.MaxCount, Quota: algo.MaxCount, Remaining: 0, ResetAfter: 10 * s}},
		},
	},
	{
		// An exact log counts to its last unit; one decision takes at most
		// algo.MaxExactCost (a larger cost is a bad request).
		Name:  "sliding_log/exact-edge",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactCost, Window: 10 * s}}},
		Steps: []Step{
			{At: 0, Cost: algo.MaxExactCost - 1, Want: algo.Result{Allowed: true, Admitted: algo.MaxExactCost - 1, Quota: algo.MaxExactCost, Remaining: 1, ResetAfter: 10 * s}},
			{At: 1 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: algo.MaxExactCost, Remaining: 0, ResetAfter: 10 * s}},
			{At: 2 * ms, Cost: 1, Want: algo.Result{Quota: algo.MaxExactCost, Remaining: 0, RetryAfter: 9998 * ms, ResetAfter: 9999 * ms, DeniedBy: 1}},
			// The whole log must leave, the action at 1ms last.
			{At: 2 * ms, Cost: algo.MaxExactCost, Want: algo.Result{Quota: algo.MaxExactCost, Remaining: 0, RetryAfter: 9999 * ms, ResetAfter: 9999 * ms, DeniedBy: 1}},
		},
	},
	{
		Name:  "sliding_log/exact-largest",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactLimit, Window: 10 * s}}},
		Steps: []Step{
			{At: 0, Cost: algo.MaxExactCost, Want: algo.Result{Allowed: true, Admitted: algo.MaxExactCost, Quota: algo.MaxExactLimit, Remaining: algo.MaxExactLimit - algo.MaxExactCost, ResetAfter: 10 * s}},
			{At: 1 * ms, Cost: algo.MaxExactCost, Want: algo.Result{Allowed: true, Admitted: algo.MaxExactCost, Quota: algo.MaxExactLimit, Remaining: algo.MaxExactLimit - 2*algo.MaxExactCost, ResetAfter: 10 * s}},
			{At: 1 * ms, Cost: 0, Want: algo.Result{Allowed: true, Quota: algo.MaxExactLimit, Remaining: algo.MaxExactLimit - 2*algo.MaxExactCost, ResetAfter: 10 * s}},
		},
	},
	{
		Name:  "sliding_log/buckets-edge",
		Limit: algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxWindowLimit, Window: 10 * s}}, Buckets: 10},
		Steps: []Step{
			{At: 0, Cost: algo.MaxWindowLimit - 1, Want: algo.Result{Allowed: true, Admitted: algo.MaxWindowLimit - 1, Quota: algo.MaxWindowLimit, Remaining: 1, ResetAfter: 10665413 * us}},
			{At: 1 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: algo.MaxWindowLimit, Remaining: 0, ResetAfter: 10664413 * us}},
			{At: 2 * ms, Cost: 1, Want: algo.Result{Quota: algo.MaxWindowLimit, Remaining: 0, RetryAfter: 10663413 * us, ResetAfter: 10663413 * us, DeniedBy: 1}},
			{At: 2 * ms, Cost: algo.MaxCount, Want: algo.Result{Quota: algo.MaxWindowLimit, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 10663413 * us, DeniedBy: 1}},
		},
	},
	{
		Name:  "window_counter/edge",
		Limit: algo.WindowCounter{Limits: []algo.Window{{Count: algo.MaxWindowLimit, Window: 10 * s}}},
		Steps: []Step{
			{At: 0, Cost: algo.MaxWindowLimit - 1, Want: algo.Result{Allowed: true, Admitted: algo.MaxWindowLimit - 1, Quota: algo.MaxWindowLimit, Remaining: 1, ResetAfter: e}},
			{At: 1 * ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: algo.MaxWindowLimit, Remaining: 0, ResetAfter: e - ms}},
			{At: 2 * ms, Cost: 1, Want: algo.Result{Quota: algo.MaxWindowLimit, Remaining: 0, RetryAfter: e - 2*ms, ResetAfter: e - 2*ms, DeniedBy: 1}},
			{At: 2 * ms, Cost: algo.MaxCount, Want: algo.Result{Quota: algo.MaxWindowLimit, Remaining: 0, RetryAfter: algo.Never, ResetAfter: e - 2*ms, DeniedBy: 1}},
		},
	},
	{
		// Debt: T = 1s, tau = 10s, limit 10. A denied charge is answered
		// as the denial it is, with nothing remaining after it, and
		// recorded: the TAT moves on by cost·T, so a peek is denied until
		// the refill has paid it back and one unit remains.
		Name:  "gcra/debt",
		Limit: algo.Debt{Limit: algo.GCRA{Burst: 9, Count: 10, Period: 10 * s}},
		Steps: []Step{
			{At: 0, Cost: 6, Want: algo.Result{Allowed: true, Admitted: 6, Quota: 10, Remaining: 4, ResetAfter: 6 * s}},
			{At: 0, Cost: 6, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 2 * s, ResetAfter: 6 * s}}, // TAT 12s
			{At: 0, Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 12 * s}},
			// Paid back to 0 remaining: spent, a peek is still denied.
			{At: 2 * s, Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 1 * s, ResetAfter: 10 * s}},
			{At: 2 * s, Cost: 1, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 1 * s, ResetAfter: 10 * s}}, // TAT 13s
			{At: 5 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 10, Remaining: 1, ResetAfter: 9 * s}},
			// A charge above the limit is recorded too: 100s of debt.
			{At: 0, Key: "huge", Cost: 100, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: algo.Never}},
			{At: 50 * s, Key: "huge", Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 41 * s, ResetAfter: 50 * s}},
			// A debt is at most the horizon ahead.
			{At: 0, Key: "most", Cost: algo.MaxCount, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: algo.Never}},
			{At: 0, Key: "most", Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: algo.MaxHorizon - 9*s, ResetAfter: algo.MaxHorizon}},
		},
	},
	{
		// Debt: T = 200ms, tau = 2s, 10 tokens.
		Name:  "token_bucket/debt",
		Limit: algo.Debt{Limit: algo.TokenBucket{Burst: 10, Count: 5, Period: s}},
		Steps: []Step{
			{At: 0, Cost: 10, Want: algo.Result{Allowed: true, Admitted: 10, Quota: 10, Remaining: 0, ResetAfter: 2 * s}},
			{At: 0, Cost: 5, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 1 * s, ResetAfter: 2 * s}}, // TAT 3s
			{At: 0, Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 1200 * ms, ResetAfter: 3 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 200 * ms, ResetAfter: 2 * s}},     // TAT 3.2s
			{At: 1200 * ms, Cost: 0, Want: algo.Result{Quota: 10, Remaining: 0, RetryAfter: 200 * ms, ResetAfter: 2 * s}}, // paid back to 0: spent
			{At: 1400 * ms, Cost: 0, Want: algo.Result{Allowed: true, Quota: 10, Remaining: 1, ResetAfter: 1800 * ms}},
		},
	},
	{
		// Debt: 3 per 10s window; the count goes past the limit, and the
		// window's end pays it back.
		Name:  "fixed_window/debt",
		Limit: algo.Debt{Limit: algo.FixedWindow{Count: 3, Window: 10 * s}},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 1, ResetAfter: e}},
			{At: 0, Cost: 2, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: e, ResetAfter: e}}, // count 4
			{At: 0, Cost: 0, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: e, ResetAfter: e}},
			{At: e, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: e, Cost: 0, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: 10 * s, ResetAfter: 10 * s}}, // spent to the unit
			{At: 0, Key: "huge", Cost: 4, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: algo.Never}},
			{At: 1 * s, Key: "huge", Cost: 0, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: e - s, ResetAfter: e - s}},
			{At: 1 * s, Key: "huge", Cost: algo.MaxCount, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: algo.Never, ResetAfter: e - s}}, // count MaxCount, not more
			{At: 1 * s, Key: "huge", Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: e - s, ResetAfter: e - s}},
		},
	},
	{
		// Debt: 5 in 3 one-second slices; T0 lies 0.334587s into its
		// slice, whose count leaves the window at 2665413µs.
		Name:  "window_counter/debt",
		Limit: algo.Debt{Limit: algo.WindowCounter{Slice: s, Limits: []algo.Window{{Count: 5, Window: 3 * s}}}},
		Steps: []Step{
			{At: 0, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 5, Remaining: 2, ResetAfter: 2665413 * us}},
			{At: 0, Cost: 4, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 2665413 * us, ResetAfter: 2665413 * us, DeniedBy: 1}}, // 7
			{At: 0, Cost: 0, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 2665413 * us, ResetAfter: 2665413 * us, DeniedBy: 1}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 1665413 * us, ResetAfter: 1665413 * us, DeniedBy: 1}},
			{At: 2665413 * us, Cost: 5, Want: algo.Result{Allowed: true, Admitted: 5, Quota: 5, Remaining: 0, ResetAfter: 3 * s}},
		},
	},
	{
		// Debt: an exact log of 5 in 3s; a denied charge of 4 is recorded
		// as 4 entries, and the peeks wait for the 6th newest to leave.
		Name:  "sliding_log/debt",
		Limit: algo.Debt{Limit: algo.SlidingLog{Limits: []algo.Window{{Count: 5, Window: 3 * s}}}},
		Steps: []Step{
			{At: 0, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 5, Remaining: 2, ResetAfter: 3 * s}},
			{At: 0, Cost: 4, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 3 * s, DeniedBy: 1}}, // 7 entries
			{At: 0, Cost: 0, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 3 * s, DeniedBy: 1}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Quota: 5, Remaining: 0, RetryAfter: 2 * s, ResetAfter: 2 * s, DeniedBy: 1}},
			{At: 3 * s, Cost: 5, Want: algo.Result{Allowed: true, Admitted: 5, Quota: 5, Remaining: 0, ResetAfter: 3 * s}},
		},
	},
	{
		// A month from the 31st in Berlin (from a shorter month's last
		// day): windows [Dec 31, Jan 31), [Jan 31, Feb 28), [Feb 28, Mar
		// 31); 1ms before and after each boundary.
		Name:  "fixed_window/calendar-month",
		Limit: algo.FixedWindow{Count: 3, Calendar: algo.Calendar{Unit: "month", TimeZone: "Europe/Berlin", AnchorDay: 31}},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 3, Remaining: 1, ResetAfter: berlin(2027, 1, 31).Sub(T0)}},
			{At: berlin(2027, 1, 31).Sub(T0) - ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 0, ResetAfter: ms}},
			{At: berlin(2027, 1, 31).Sub(T0) - ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: ms, ResetAfter: ms}},
			{At: berlin(2027, 1, 31).Sub(T0) + ms, Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 28*24*time.Hour - ms}},
			{At: berlin(2027, 2, 28).Sub(T0) - ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: ms, ResetAfter: ms}},
			{At: berlin(2027, 2, 28).Sub(T0) + ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: (31*24-1)*time.Hour - ms}}, // spring forward on Mar 28
		},
	},
	{
		// A day in Santiago whose midnight does not exist: the clocks
		// spring from 23:59:59 on September 4th to 01:00 on the 5th
		// (04:00 UTC), where the 5th, 23 hours long, starts.
		Name:  "fixed_window/calendar-day-gap",
		Limit: algo.FixedWindow{Count: 3, Calendar: algo.Calendar{Unit: "day", TimeZone: "America/Santiago"}},
		Steps: []Step{
			{At: utc(2027, 9, 5, 3, 30).Sub(T0), Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Quota: 3, Remaining: 0, ResetAfter: 30 * time.Minute}},
			{At: utc(2027, 9, 5, 4, 0).Sub(T0) - ms, Cost: 1, Want: algo.Result{Quota: 3, Remaining: 0, RetryAfter: ms, ResetAfter: ms}},
			{At: utc(2027, 9, 5, 4, 0).Sub(T0), Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 3, Remaining: 2, ResetAfter: 23 * time.Hour}},
		},
	},
	{
		// A day in New York as the clocks fall back: 25 hours.
		Name:  "fixed_window/calendar-day",
		Limit: algo.FixedWindow{Count: 2, Calendar: algo.Calendar{Unit: "day", TimeZone: "America/New_York"}},
		Steps: []Step{
			{At: newYork(2027, 11, 7).Sub(T0) + ms, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 2, Remaining: 0, ResetAfter: 25*time.Hour - ms}},
			{At: newYork(2027, 11, 8).Sub(T0) - ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: ms, ResetAfter: ms}},
			{At: newYork(2027, 11, 8).Sub(T0) + ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: 24*time.Hour - ms}},
		},
	},
	{
		// A week from Sunday in New York over the spring change: 167 hours.
		Name:  "fixed_window/calendar-week",
		Limit: algo.FixedWindow{Count: 2, Calendar: algo.Calendar{Unit: "week", TimeZone: "America/New_York", WeekStart: "sunday"}},
		Steps: []Step{
			{At: newYork(2027, 3, 14).Sub(T0) - ms, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 2, Remaining: 1, ResetAfter: ms}},
			{At: newYork(2027, 3, 14).Sub(T0) + ms, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Quota: 2, Remaining: 0, ResetAfter: 167*time.Hour - ms}},
			{At: newYork(2027, 3, 21).Sub(T0) - ms, Cost: 1, Want: algo.Result{Quota: 2, Remaining: 0, RetryAfter: ms, ResetAfter: ms}},
		},
	},
	{
		// The most slots, the largest permit id, the longest hold.
		Name:  "concurrency/edge",
		Limit: algo.Concurrency{Count: algo.MaxSlots, HoldFor: algo.MaxHoldFor},
		Steps: []Step{
			{At: 0, Cost: algo.MaxSlots - 1, Permit: algo.MaxPermitID, Want: algo.Result{Allowed: true, Admitted: algo.MaxSlots - 1, Quota: algo.MaxSlots, Remaining: 1, ResetAfter: algo.MaxHoldFor}},
			{At: 0, Cost: 2, Want: algo.Result{Quota: algo.MaxSlots, Remaining: 1, RetryAfter: algo.MaxHoldFor, ResetAfter: algo.MaxHoldFor}},
			{At: 0, Cost: algo.MaxCount, Want: algo.Result{Quota: algo.MaxSlots, Remaining: 1, RetryAfter: algo.Never, ResetAfter: algo.MaxHoldFor}},
			{At: 1 * s, Permit: algo.MaxPermitID, Op: algo.Release, Want: algo.Result{Allowed: true, Admitted: algo.MaxSlots - 1, Quota: algo.MaxSlots, Remaining: algo.MaxSlots}},
		},
	},
	{
		Name:  "gate/edge",
		Limit: algo.Gate{Interval: algo.MaxHorizon},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Quota: 1, Remaining: 0, ResetAfter: algo.MaxHorizon}},
			{At: 0, Cost: 1, Want: algo.Result{Quota: 1, Remaining: 0, RetryAfter: algo.MaxHorizon, ResetAfter: algo.MaxHorizon}},
			{At: 0, Key: "never", Cost: algo.MaxCount, Want: algo.Result{Quota: 1, Remaining: 1, RetryAfter: algo.Never}},
		},
	},
}

// maxTAT is the largest limit of a GCRA or token bucket: one action per µs
// over the 100-year horizon (algo.MaxHorizon in µs).
const maxTAT = 3_153_600_000_000_000

// berlin and newYork are midnight of a day in those zones.
func berlin(y int, m time.Month, d int) time.Time  { return midnight("Europe/Berlin", y, m, d) }
func newYork(y int, m time.Month, d int) time.Time { return midnight("America/New_York", y, m, d) }

// utc is a time in UTC, to the minute.
func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func midnight(zone string, y int, m time.Month, d int) time.Time {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

// e is the end of the 10s window that holds T0, since T0.
const e = 9665413 * us

// Run plays every trace against st, and races 100 goroutines for one key
// of every algorithm and with all-or-nothing batches (concurrency.go),
// under keys that start with ns so that several runs can share one
// server. It fails t on any result that differs from the trace, and on a
// race that admits other than the limit.
func Run(t *testing.T, st store.Store, ns string) {
	for _, tr := range Traces {
		t.Run(tr.Name, func(t *testing.T) {
			plan := algo.MustCompile(tr.Limit)
			for i, step := range tr.Steps {
				key := step.Key
				if key == "" {
					key = "k"
				}
				req := store.Request{Key: ns + ":" + tr.Name + ":" + key, Plan: plan, Cost: step.Cost, Time: T0.Add(step.At)}
				got, err := decideStep(st, req, step)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != step.Want {
					t.Errorf("step %d (at %v, key %s, cost %d, permit %d %v):\n got %s\nwant %s", i, step.At, key, step.Cost, step.Permit, step.Op, format(got), format(step.Want))
				}
			}
		})
	}
	t.Run("races", func(t *testing.T) { races(t, st, ns) })
}

// decideStep decides a trace's step: Decide, or for a step with a permit
// or an op that op on its slots (store.DecideSlots).
func decideStep(st store.Store, req store.Request, step Step) (algo.Result, error) {
	ctx := context.Background()
	if step.Permit == 0 && step.Op == algo.Acquire {
		return st.Decide(ctx, req)
	}
	res := make([]algo.Result, 1)
	_, err := store.DecideSlots(ctx, st, step.Op, []store.Request{req}, step.Permit, res)
	return res[0], err
}

// format renders a result for failure messages.
func format(r algo.Result) string {
	return fmt.Sprintf("{allowed:%v admitted:%d limit:%d remaining:%d retry:%v reset:%v denied_by:%d}", r.Allowed, r.Admitted, r.Quota, r.Remaining, r.RetryAfter, r.ResetAfter, r.DeniedBy)
}

// coreRacers are the concurrency cases of GCRA, the token bucket, the
// fixed window, the gate and concurrency slots: 100 goroutines, each limit
// admitting 37 (the gate 1) and refilling (or ending a hold) too slowly for
// a test run to see it.
var coreRacers = []racer{
	{Name: "gcra", Limit: algo.GCRA{Burst: 36, Count: 1, Period: time.Hour}, Cost: 1, Attempts: 1, Want: 37, Goroutines: 100},
	{Name: "token_bucket", Limit: algo.TokenBucket{Burst: 37, Count: 1, Period: time.Hour}, Cost: 1, Attempts: 1, Want: 37, Goroutines: 100},
	{Name: "fixed_window", Limit: algo.FixedWindow{Count: 37, Window: 1000 * time.Hour}, Cost: 1, Attempts: 1, Want: 37, Goroutines: 100},
	{Name: "gate", Limit: algo.Gate{Interval: time.Hour}, Cost: 1, Attempts: 1, Want: 1, Goroutines: 100},
	{Name: "concurrency", Limit: algo.Concurrency{Count: 37, HoldFor: time.Hour}, Cost: 1, Attempts: 1, Want: 37, Goroutines: 100},
}

// windowedRacers are the concurrency cases of the windowed algorithms:
// every sliding log mode, exact and sampled, with a gap, and a window
// counter. Their windows are long enough that no test run crosses them,
// also under the store's clock.
var windowedRacers = func() []racer {
	h := time.Hour
	one := []algo.Window{{Count: 37, Window: h}, {Count: 50, Window: 2 * h}}
	var rs []racer
	for _, b := range []int64{0, 10} {
		kind := "exact"
		if b > 0 {
			kind = "sampled"
		}
		rs = append(rs,
			racer{Name: "sliding_log/binary/" + kind, Limit: algo.SlidingLog{Limits: one, Buckets: b}, Cost: 1, Attempts: 1, Want: 37},
			racer{Name: "sliding_log/nary/" + kind, Limit: algo.SlidingLog{Limits: one, Buckets: b, Mode: algo.Nary}, Cost: 3, Attempts: 2, Want: 37},
			racer{Name: "sliding_log/uniform/" + kind, Limit: algo.SlidingLog{Limits: one, Buckets: b, Mode: algo.Uniform}, Cost: 1, Attempts: 2, Want: 37},
			racer{Name: "sliding_log/gap/" + kind, Limit: algo.SlidingLog{Limits: one, Buckets: b, MinGap: h}, Cost: 1, Attempts: 1, Want: 1},
			racer{Name: "sliding_log/uniform-gap/" + kind, Limit: algo.SlidingLog{Limits: one, Buckets: b, MinGap: h, Mode: algo.Uniform}, Cost: 1, Attempts: 1, Want: 1},
		)
	}
	rs = append(rs, racer{Name: "window_counter", Limit: algo.WindowCounter{Limits: []algo.Window{{Count: 37, Window: h}, {Count: 60, Window: 2 * h}}, Slice: time.Minute}, Cost: 1, Attempts: 1, Want: 37})
	for i := range rs {
		rs[i].Goroutines = 100
	}
	return rs
}()
