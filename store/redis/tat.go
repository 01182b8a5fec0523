package redis

import "github.com/sluicehq/sluice/algo"

// GCRA and TokenBucket run scripts/tat.lua's virtual-scheduling step with
// the increment n·T and the tolerance τ of the plan's TAT; the check value
// is the new TAT when ok, else max(stored TAT, now). A reserving plan
// (algo.Reserving) runs with its own, grown, tolerance.
var (
	gcraBinding        = tatBinding
	tokenBucketBinding = tatBinding
	tatBinding         = binding{
		file: "tat.lua", letter: "t",
		args:   tatArgs,
		extras: func(*algo.Plan) int64 { return 0 },
		result: tatResult,
	}
)

func tatArgs(args []string, pl *algo.Plan, cost int64) []string {
	p, _ := pl.TAT()
	// Beyond Quota+1 the answer is the same, and beyond the horizon a
	// debt's (algo.Debt); n·T cannot overflow.
	n := min(cost, p.Quota+1)
	if pl.Debt() {
		n = min(cost, algo.MaxHorizon.Microseconds()/p.Interval+1)
	}
	return append(args, itoa(n*p.Interval), itoa(p.Tolerance))
}

func tatResult(pl *algo.Plan, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
	p, _ := pl.TAT()
	if !committed {
		return p.Result(true, now, val-cost*p.Interval, 0)
	}
	return p.Result(ok, now, val, cost)
}
