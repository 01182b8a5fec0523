package policy

import (
	"time"

	"github.com/sluicehq/sluice/algo"
)

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
	// Delay is how long an allowed request waits before it acts: a policy
	// node with a delay (delay: {max: ...}) admits a cost its limits
	// would admit within the delay, its units reserved at once, and the
	// caller waits Delay (the longest of the levels'). It is 0 for a
	// request that may act at once, and for a denied one.
	Delay time.Duration
	// Listed is the allow or deny list entry of a policy that decided,
	// such as "deny 203.0.113.0/24 at login/*" (policy.Listed): a path an
	// allow list matches decides no level; a deny list denies the whole
	// decision without deciding a level. Empty when no list matched.
	Listed string
	// Permit is the permit id under which an allowed decision holds slots
	// of concurrency limits (algo.Concurrency): the holder releases them,
	// or renews their hold, with it. It is 0 when the decision holds no
	// slot under an id.
	Permit int64
	// Ticket is the ticket an admitted Estimate opened: the id to Settle
	// it with (the service's settle_id); empty for every other decision.
	Ticket string
	// Settled reports whether a Settle found its estimate open and settled
	// it.
	Settled bool
}

// Withdraw makes a decision that was allowed after its Delay a denial, to
// be retried after that delay: the answer of a caller that will not hold
// the request for it (too many held already, or a deadline too close),
// having given its units back.
func (d *Decision) Withdraw() {
	d.Allowed = false
	d.Summary.Allowed, d.Summary.RetryAfter = false, d.Delay
}

// Level is one limit of one node on a request's path, and its result.
type Level struct {
	// Pattern is the policy node, e.g. "user/*/trade".
	Pattern string
	// Name is the node's name field ("" when it has none): Envoy's
	// rate_limit name, for a policy import-envoy wrote.
	Name string
	// Key is the state key, e.g. "user:alex:trade".
	Key string
	// Limit is the limit as configured; Limit.Spec() is its serialized
	// form (AppendSpecJSON), and Window the time it grants its quota in.
	// It is nil for a level that no algo.Limit decided (a user Lua
	// script's).
	Limit algo.Limit
	// Shadow levels report denials without enforcing them.
	Shadow bool
	Result algo.Result
	// Owed reports a denied charge that the level's limit with debt
	// recorded in full (algo.Debt): counted, and answered as a denial
	// (not under counts: each or stop_when_over, where every denied charge
	// is recorded).
	Owed bool
	// form is what the level shows of Limit, made when the policy
	// compiled it (nil: not, a request's own limit).
	form *levelForm
}

// AppendSpecJSON appends the level's limit as JSON (algo.Spec.AppendJSON
// of Limit.Spec(); the zero Spec's without a Limit): the bytes the policy
// made of it when it compiled it, or made now for a limit it did not (a
// request's own).
func (l *Level) AppendSpecJSON(b []byte) []byte {
	if l.form != nil {
		return append(b, l.form.specJSON...)
	}
	var s algo.Spec
	if l.Limit != nil {
		s = l.Limit.Spec()
	}
	return s.AppendJSON(b)
}

// Window returns the time in which the level's limit grants its quota,
// the w of the IETF RateLimit-Policy field (algo.Quota), as the policy
// found it when it compiled the limit; 0 without a Limit.
func (l *Level) Window() time.Duration {
	if l.form != nil {
		return l.form.window
	}
	if l.Limit == nil {
		return 0
	}
	_, w := algo.Quota(l.Limit)
	return w
}

// A levelForm is what a level shows of its limit beside its result: the
// limit's Spec as JSON and the window of its quota.
type levelForm struct {
	specJSON string
	window   time.Duration
}

// A plan is a limit compiled by a policy: the plan its requests carry,
// and the form of its levels, made with it. A hit that decides by other
// limits decides by other plans, so its levels cannot show a form that
// is not their limit's; a plan without a form (a request's own limit)
// has its levels make what they show when they are answered.
type plan struct {
	algo.Plan
	form *levelForm
}

// makeForms gives each plan the form of its limit (limits[i], its
// plan's), once the plans are final. Limits of one spec share one form:
// seen, unless nil, keeps those made so far (an Envoy configuration's
// 100,000 descriptors have a few limits).
func makeForms(seen map[string]*levelForm, limits []algo.Limit, plans []plan) {
	for i := range plans {
		plans[i].form = formOf(seen, limits[i])
	}
}

// formOf returns the form of lim's levels, the one in seen if it holds
// one of its spec (seen may be nil).
func formOf(seen map[string]*levelForm, lim algo.Limit) *levelForm {
	var buf [256]byte
	s := lim.Spec()
	b := s.AppendJSON(buf[:0])
	if f, ok := seen[string(b)]; ok {
		return f
	}
	_, w := algo.Quota(lim)
	f := &levelForm{specJSON: string(b), window: w}
	if seen != nil {
		seen[f.specJSON] = f
	}
	return f
}

// Summarize folds level results into one, as redis-cell would report a
// single limiter. Shadow levels do not count. When every enforced level
// allowed, the summary is allowed, with Quota and Remaining from the
// enforced level with the least remaining. When some denied, the summary
// describes the denying level that holds the request back longest (Never
// wins; the first on ties): its Quota, Remaining, RetryAfter and DeniedBy.
// ResetAfter is the largest over the enforced levels. With no enforced
// level, the summary is an allowed, empty result.
func Summarize(levels []Level) algo.Result {
	sum := algo.Result{Allowed: true}
	first := true
	for i := range levels {
		r := &levels[i].Result
		if levels[i].Shadow {
			continue
		}
		if first || r.Remaining < sum.Remaining {
			sum.Quota, sum.Remaining = r.Quota, r.Remaining
		}
		first = false
		sum.ResetAfter = max(sum.ResetAfter, r.ResetAfter)
	}
	if d := Denier(levels); d != nil {
		r := &d.Result
		sum.Allowed = false
		sum.Quota, sum.Remaining = r.Quota, r.Remaining
		sum.RetryAfter, sum.DeniedBy = r.RetryAfter, r.DeniedBy
	}
	return sum
}

// Denier returns the enforced level that denied and holds the request
// back longest (Never is the longest; the first on ties), or nil when
// every enforced level allowed: the level a denial is about.
func Denier(levels []Level) *Level {
	var d *Level
	for i := range levels {
		l := &levels[i]
		if !l.Shadow && !l.Result.Allowed && (d == nil || longerWait(l.Result.RetryAfter, d.Result.RetryAfter)) {
			d = l
		}
	}
	return d
}

// longerWait reports whether a denial with RetryAfter a holds a request
// back longer than one with b (Never is the longest).
func longerWait(a, b time.Duration) bool {
	if b == algo.Never {
		return false
	}
	return a == algo.Never || a > b
}
