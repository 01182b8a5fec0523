package redis

import "github.com/sluicehq/sluice/algo"

// GCRA and TokenBucket run scripts/tat.lua's virtual-scheduling step with
// the increment n·T and the tolerance τ; the check value is the new TAT
// when ok, else max(stored TAT, now).
var (
	gcraBinding        = bind(binding{file: "tat.lua", letter: 't'}, tatArgs[algo.GCRA], nil, tatResult[algo.GCRA])
	tokenBucketBinding = bind(binding{file: "tat.lua", letter: 't'}, tatArgs[algo.TokenBucket], nil, tatResult[algo.TokenBucket])
)

// tatLimit is a limit computed as a TAT.
type tatLimit interface {
	algo.Limit
	TAT() (algo.TAT, error)
}

func tatArgs[L tatLimit](args []string, l L, cost int64) []string {
	p, _ := l.TAT()
	n := min(cost, p.Limit+1) // beyond Limit+1 the answer is the same, and n·T cannot overflow
	return append(args, itoa(n*p.Interval), itoa(p.Tolerance))
}

func tatResult[L tatLimit](l L, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
	p, _ := l.TAT()
	if !committed {
		return p.Result(true, now, val-cost*p.Interval, 0)
	}
	return p.Result(ok, now, val, cost)
}
