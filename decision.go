package sluice

import "github.com/sluicehq/sluice/algo"

// Decision is the outcome of a hierarchical check: every level the request
// hit, and one summary in the shape of CL.THROTTLE's reply.
type Decision struct {
	// Allowed reports whether the request may go on: every level that is
	// not Shadow allowed it (or it matched no level and unmatched requests
	// are allowed).
	Allowed bool
	// Matched is false when the request hit no level with limits.
	Matched bool
	// Summary is the decision as one result; see Summarize.
	Summary algo.Result
	// Levels are the levels the request hit, from the root down; a node
	// with several limits has one Level per limit.
	Levels []Level
}

// Level is one limit of one node on a request's path, and its result.
type Level struct {
	// Pattern is the policy node, e.g. "user/*/trade".
	Pattern string
	// Key is the state key, e.g. "user:alex:trade".
	Key string
	// Limit is the limit as configured; Limit.Spec() is its serialized
	// form. It is nil for a level that no algo.Limit decided (a user Lua
	// script's).
	Limit algo.Limit
	// Shadow levels report denials without enforcing them.
	Shadow bool
	Result algo.Result
}

// Summarize folds level results into one, as redis-cell would report a
// single limiter: allowed when every enforced (non-shadow) level allowed;
// Limit and Remaining from the enforced level with the least remaining;
// RetryAfter the largest among the enforced levels that denied (Never
// wins); ResetAfter the largest over the enforced levels. Shadow levels do
// not count. With no enforced level, the summary is an allowed, empty
// result.
func Summarize(levels []Level) algo.Result {
	sum := algo.Result{Allowed: true}
	first := true
	for _, l := range levels {
		if l.Shadow {
			continue
		}
		r := l.Result
		if first || r.Remaining < sum.Remaining {
			sum.Quota, sum.Remaining = r.Quota, r.Remaining
		}
		first = false
		sum.ResetAfter = max(sum.ResetAfter, r.ResetAfter)
		if !r.Allowed {
			sum.Allowed = false
			if r.RetryAfter == algo.Never || sum.RetryAfter == algo.Never {
				sum.RetryAfter = algo.Never
			} else {
				sum.RetryAfter = max(sum.RetryAfter, r.RetryAfter)
			}
		}
	}
	return sum
}
