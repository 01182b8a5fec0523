package redis

import "github.com/sluicehq/sluice/algo"

// Gate runs scripts/gate.lua with the interval and the cost; the check
// value is when the gate opens after the decision.
var gateBinding = bind(binding{file: "gate.lua", letter: "g"},
	func(args []string, l algo.Gate, cost int64) []string {
		return append(args, itoa(l.Interval.Microseconds()), itoa(cost))
	},
	nil,
	func(l algo.Gate, now, cost int64, ok bool, val int64, _ []int64, committed bool) algo.Result {
		if !committed {
			if cost == 1 {
				val = 0 // the gate was open
			}
			return l.Result(true, now, val, 0)
		}
		return l.Result(ok, now, val, cost)
	})
