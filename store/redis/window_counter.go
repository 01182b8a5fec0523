package redis

import "github.com/sluicehq/sluice/algo"

// WindowCounter runs scripts/window_counter.lua with the cost, the slice
// and each limit's limit and length in slices; besides ok and value (the
// latest slice, or the record's) it reports admitted, wait, reset, denied
// by and each window's count (see windowResult).
var windowCounterBinding = bind(binding{file: "window_counter.lua", letter: "w", lazy: true},
	func(args []string, l algo.WindowCounter, cost int64) []string {
		var lmax int64
		for _, w := range l.Limits {
			lmax = max(lmax, w.Count)
		}
		args = append(args, itoa(min(cost, lmax+1)), itoa(l.SliceMicros()), itoa(int64(len(l.Limits))))
		for i, w := range l.Limits {
			args = append(args, itoa(w.Count), itoa(l.Slices(i)))
		}
		return args
	},
	func(l algo.WindowCounter) int64 { return int64(4 + len(l.Limits)) },
	func(l algo.WindowCounter, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
		return windowResult(l.Limits, now, cost, ok, committed, true, extra, func() int64 {
			return l.RecordedReset(now, val, val >= 0)
		})
	})
