package redis

import "github.com/sluicehq/sluice/algo"

// SlidingLog runs scripts/sliding_log.lua with the cost, the mode, the
// minimum gap, the buckets and each limit's limit, window and bucket
// width; besides ok and value it reports admitted, wait, reset, denied by
// and each window's count (see windowResult).
var slidingLogBinding = func() binding {
	b := bind(binding{file: "sliding_log.lua", letter: "s", lazy: true}, slidingLogArgs,
		func(l algo.SlidingLog) int64 { return int64(4 + len(l.Limits)) },
		func(l algo.SlidingLog, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
			return windowResult(l.Limits, now, cost, ok, committed, l.Mode != algo.Uniform, extra, func() int64 {
				if l.Buckets == 0 { // the clock is the newest entry: reset - longest window
					return l.RecordedReset(now, extra[2]-l.MaxWindow().Microseconds(), extra[2] > 0)
				}
				return l.RecordedReset(now, val, val >= 0) // value: the clock, or the record's time
			})
		})
	args := b.args
	b.args = func(a []string, p *algo.Plan, cost int64) []string {
		if !p.Debt() { // beyond the largest limit + 1 the answer is the same; a debt records it all
			cost = min(cost, limitOf[algo.SlidingLog](p).MaxLimit()+1)
		}
		return args(a, p, cost)
	}
	return b
}()

// slidingLogArgs appends sliding_log.lua's arguments for a cost.
func slidingLogArgs(args []string, l algo.SlidingLog, cost int64) []string {
	mode := "b"
	switch l.Mode {
	case algo.Nary:
		mode = "n"
	case algo.Uniform:
		mode = "u"
	}
	args = append(args, itoa(cost), mode, itoa(l.MinGap.Microseconds()), itoa(l.Buckets), itoa(int64(len(l.Limits))))
	for i, w := range l.Limits {
		var width int64
		if l.Buckets > 0 {
			width = l.BucketWidth(i)
		}
		args = append(args, itoa(w.Count), itoa(w.Window.Microseconds()), itoa(width))
	}
	return args
}
