package redis

import "github.com/sluicehq/sluice/algo"

// GCRA and TokenBucket run scripts/tat.lua's virtual-scheduling step with
// the increment n·T and the tolerance τ; the check value is the new TAT
// when ok, else max(stored TAT, now).
var (
	gcraBinding = bind(binding{file: "tat.lua", letter: "t"},
		func(args []string, l algo.GCRA, cost int64) []string { return tatArgs(args, tatOf(l.TAT()), cost) },
		nil,
		func(l algo.GCRA, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
			return tatResult(tatOf(l.TAT()), now, cost, ok, val, committed)
		})
	tokenBucketBinding = bind(binding{file: "tat.lua", letter: "t"},
		func(args []string, l algo.TokenBucket, cost int64) []string {
			return tatArgs(args, tatOf(l.TAT()), cost)
		},
		nil,
		func(l algo.TokenBucket, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
			return tatResult(tatOf(l.TAT()), now, cost, ok, val, committed)
		})
)

// tatOf drops the error of a valid limit's TAT.
func tatOf(p algo.TAT, _ error) algo.TAT { return p }

func tatArgs(args []string, p algo.TAT, cost int64) []string {
	n := min(cost, p.Limit+1) // beyond Limit+1 the answer is the same, and n·T cannot overflow
	return append(args, itoa(n*p.Interval), itoa(p.Tolerance))
}

func tatResult(p algo.TAT, now, cost int64, ok bool, val int64, committed bool) algo.Result {
	if !committed {
		return p.Result(true, now, val-cost*p.Interval, 0)
	}
	return p.Result(ok, now, val, cost)
}
