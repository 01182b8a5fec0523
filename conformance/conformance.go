// Package conformance holds the traces every Sluice store must pass with
// identical results. A trace is a sequence of decisions at explicit times,
// each with the result the algorithm's definition gives by hand.
package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// T0 is the start time of every trace: the t_ns of the README's replay
// example, in µs.
var T0 = time.UnixMicro(1800003000334587)

// Step is one decision of a trace and the result it must give.
type Step struct {
	At   time.Duration // since T0
	Key  string        // "k" when empty
	Cost int64
	Want algo.Result
}

// Trace is a named sequence of decisions on one limit.
type Trace struct {
	Name  string
	Limit algo.Limit
	Steps []Step
}

const s = time.Second

// Traces are the hand-checked traces, one table per algorithm.
var Traces = []Trace{
	{
		// CL.THROTTLE user123 15 30 60: T = 2s, tau = 32s, limit 16.
		Name:  "gcra/redis-cell",
		Limit: algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 14, ResetAfter: 3 * s}},
			{At: 1 * s, Key: "peek", Cost: 0, Want: algo.Result{Allowed: true, Limit: 16, Remaining: 16}},
			{At: 1 * s, Key: "peek", Cost: 0, Want: algo.Result{Allowed: true, Limit: 16, Remaining: 16}},
			{At: 0, Key: "full", Cost: 16, Want: algo.Result{Allowed: true, Admitted: 16, Limit: 16, Remaining: 0, ResetAfter: 32 * s}},
			{At: 0, Key: "full", Cost: 1, Want: algo.Result{Allowed: false, Limit: 16, Remaining: 0, RetryAfter: 2 * s, ResetAfter: 32 * s}},
			{At: 0, Key: "full", Cost: 0, Want: algo.Result{Allowed: true, Limit: 16, Remaining: 0, ResetAfter: 32 * s}},
			{At: 3 * s, Key: "full", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 0, ResetAfter: 31 * s}},
			{At: 3 * s, Key: "full", Cost: 2, Want: algo.Result{Allowed: false, Limit: 16, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 31 * s}},
			{At: 0, Key: "over", Cost: 17, Want: algo.Result{Allowed: false, Limit: 16, Remaining: 16, RetryAfter: algo.Never}},
			{At: 40 * s, Key: "full", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 500 * time.Millisecond, Key: "half", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 15, ResetAfter: 2 * s}},
			{At: 1500 * time.Millisecond, Key: "half", Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 16, Remaining: 14, ResetAfter: 3 * s}},
		},
	},
	{
		// 10 tokens, 5 per second: T = 200ms, tau = 2s.
		Name:  "token_bucket",
		Limit: algo.TokenBucket{Burst: 10, Rate: 5, Per: time.Second},
		Steps: []Step{
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 10, Remaining: 9, ResetAfter: 200 * time.Millisecond}},
			{At: 0, Cost: 9, Want: algo.Result{Allowed: true, Admitted: 9, Limit: 10, Remaining: 0, ResetAfter: 2 * s}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 200 * time.Millisecond, ResetAfter: 2 * s}},
			{At: 500 * time.Millisecond, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Limit: 10, Remaining: 0, ResetAfter: 1900 * time.Millisecond}},
			{At: 500 * time.Millisecond, Cost: 11, Want: algo.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 1900 * time.Millisecond}},
			{At: 500 * time.Millisecond, Key: "fresh", Cost: 10, Want: algo.Result{Allowed: true, Admitted: 10, Limit: 10, Remaining: 0, ResetAfter: 2 * s}},
			{At: 10 * s, Cost: 0, Want: algo.Result{Allowed: true, Limit: 10, Remaining: 10}},
		},
	},
	{
		// 3 per 10s window; T0 lies 0.334587s into its window.
		Name:  "fixed_window",
		Limit: algo.FixedWindow{Limit: 3, Window: 10 * s},
		Steps: []Step{
			{At: 0, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Limit: 3, Remaining: 1, ResetAfter: 9665413 * time.Microsecond}},
			{At: 1 * s, Cost: 2, Want: algo.Result{Allowed: false, Limit: 3, Remaining: 1, RetryAfter: 8665413 * time.Microsecond, ResetAfter: 8665413 * time.Microsecond}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 3, Remaining: 0, ResetAfter: 8665413 * time.Microsecond}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 8665413 * time.Microsecond}},
			{At: 9665413 * time.Microsecond, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 3, Remaining: 2, ResetAfter: 10 * s}},
			{At: 9665413 * time.Microsecond, Cost: 4, Want: algo.Result{Allowed: false, Limit: 3, Remaining: 2, RetryAfter: algo.Never, ResetAfter: 10 * s}},
			{At: 9665413 * time.Microsecond, Cost: 2, Want: algo.Result{Allowed: true, Admitted: 2, Limit: 3, Remaining: 0, ResetAfter: 10 * s}},
			{At: 30 * s, Cost: 0, Want: algo.Result{Allowed: true, Limit: 3, Remaining: 3}},
			{At: 30 * s, Key: "fresh", Cost: 3, Want: algo.Result{Allowed: true, Admitted: 3, Limit: 3, Remaining: 0, ResetAfter: 9665413 * time.Microsecond}},
		},
	},
	{
		Name:  "gate",
		Limit: algo.Gate{Interval: 5 * s},
		Steps: []Step{
			{At: 0, Cost: 0, Want: algo.Result{Allowed: true, Limit: 1, Remaining: 1}},
			{At: 0, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 1, Remaining: 0, ResetAfter: 5 * s}},
			{At: 1 * s, Cost: 1, Want: algo.Result{Allowed: false, Limit: 1, Remaining: 0, RetryAfter: 4 * s, ResetAfter: 4 * s}},
			{At: 1 * s, Cost: 0, Want: algo.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 4 * s}},
			{At: 5 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 1, Remaining: 0, ResetAfter: 5 * s}},
			{At: 5 * s, Cost: 2, Want: algo.Result{Allowed: false, Limit: 1, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 5 * s}},
			{At: 60 * s, Cost: 1, Want: algo.Result{Allowed: true, Admitted: 1, Limit: 1, Remaining: 0, ResetAfter: 5 * s}},
		},
	},
}

// Run plays every trace against st, under keys that start with ns so
// that several runs can share one server, and fails t on any result that
// differs from the trace.
func Run(t *testing.T, st sluice.Store, ns string) {
	for _, tr := range Traces {
		t.Run(tr.Name, func(t *testing.T) {
			for i, step := range tr.Steps {
				key := step.Key
				if key == "" {
					key = "k"
				}
				req := sluice.Request{Key: ns + ":" + tr.Name + ":" + key, Limit: tr.Limit, Cost: step.Cost, Time: T0.Add(step.At)}
				got, err := st.Decide(context.Background(), req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != step.Want {
					t.Errorf("step %d (at %v, key %s, cost %d):\n got %s\nwant %s", i, step.At, key, step.Cost, Format(got), Format(step.Want))
				}
			}
		})
	}
}

// Format renders a result for failure messages.
func Format(r algo.Result) string {
	return fmt.Sprintf("{allowed:%v admitted:%d limit:%d remaining:%d retry:%v reset:%v denied_by:%d}", r.Allowed, r.Admitted, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.DeniedBy)
}
