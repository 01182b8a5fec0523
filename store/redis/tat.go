package redis

import "github.com/sluicehq/sluice/algo"

// GCRA and TokenBucket run scripts/tat.lua's virtual-scheduling step with
// the increment n·T and the tolerance τ; the check value is the new TAT
// when ok, else max(stored TAT, now). Their bindings take any limit of
// their kind with a TAT, an *algo.Plan included: a reserving plan
// (algo.Plan.Reserving) runs with its own, grown, tolerance.
var (
	gcraBinding        = tatBinding
	tokenBucketBinding = tatBinding
	tatBinding         = binding{
		file: "tat.lua", letter: "t",
		accepts: func(l algo.Limit) bool { _, ok := tatFor(l); return ok },
		args:    tatArgs,
		extras:  func(algo.Limit) int64 { return 0 },
		result:  tatResult,
	}
)

// tatFor returns the TAT parameters of a limit that has them.
func tatFor(l algo.Limit) (algo.TAT, bool) {
	t, ok := l.(interface{ TAT() (algo.TAT, error) })
	if !ok {
		return algo.TAT{}, false
	}
	p, err := t.TAT()
	return p, err == nil
}

func tatArgs(args []string, l algo.Limit, cost int64) []string {
	p, _ := tatFor(l)
	n := min(cost, p.Quota+1) // beyond Quota+1 the answer is the same, and n·T cannot overflow
	return append(args, itoa(n*p.Interval), itoa(p.Tolerance))
}

func tatResult(l algo.Limit, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
	p, _ := tatFor(l)
	if !committed {
		return p.Result(true, now, val-cost*p.Interval, 0)
	}
	return p.Result(ok, now, val, cost)
}
