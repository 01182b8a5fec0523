package redis

import "github.com/sluicehq/sluice/algo"

// FixedWindow runs scripts/fixed_window.lua with the window, the limit and
// the cost; the check value is the window's count after the decision, and
// the extra value the end of the window counted, from which the Result is
// taken at algo.FixedWindow.At's time.
var fixedWindowBinding = bind(binding{file: "fixed_window.lua", letter: "f"},
	func(args []string, l algo.FixedWindow, cost int64) []string {
		return append(args, itoa(algo.Micros(l.Window)), itoa(l.Count), itoa(cost))
	},
	func(algo.FixedWindow) int64 { return 1 },
	func(l algo.FixedWindow, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
		now = max(now, extra[0]-algo.Micros(l.Window))
		if !committed {
			return l.Result(true, now, val-cost, 0)
		}
		return l.Result(ok, now, val, cost)
	})
