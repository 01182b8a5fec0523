package redis

import "github.com/sluicehq/sluice/algo"

// WindowCounter runs scripts/window_counter.lua with the cost, the slice
// and each limit's limit and length in slices; besides ok and value (the
// latest slice, or the record's) it reports admitted, wait, reset, denied
// by and each window's count (see windowResult).
var windowCounterBinding = func() binding {
	b := bind(binding{file: "window_counter.lua", letter: "w", lazy: true}, windowCounterArgs,
		func(l algo.WindowCounter) int64 { return int64(4 + len(l.Limits)) },
		func(l algo.WindowCounter, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
			return windowResult(l.Limits, now, cost, ok, committed, true, extra, func() int64 {
				return l.RecordedReset(now, val, val >= 0)
			})
		})
	args := b.args
	b.args = func(a []string, p *algo.Plan, cost int64) []string {
		if !p.Debt() { // beyond the largest limit + 1 the answer is the same; a debt records it all
			var lmax int64
			for _, w := range limitOf[algo.WindowCounter](p).Limits {
				lmax = max(lmax, w.Count)
			}
			cost = min(cost, lmax+1)
		}
		return args(a, p, cost)
	}
	return b
}()

// windowCounterArgs appends window_counter.lua's arguments for a cost.
func windowCounterArgs(args []string, l algo.WindowCounter, cost int64) []string {
	args = append(args, itoa(cost), itoa(l.SliceMicros()), itoa(int64(len(l.Limits))))
	for i, w := range l.Limits {
		args = append(args, itoa(w.Count), itoa(l.Slices(i)))
	}
	return args
}
