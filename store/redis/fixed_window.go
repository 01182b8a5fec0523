package redis

import (
	"time"

	"github.com/sluicehq/sluice/algo"
)

// FixedWindow runs scripts/fixed_window.lua with the window, the limit and
// the cost, and for a calendar's windows the windows around the decision's
// time (calendarWindows); the check value is the window's count after the
// decision, and the extra value the end of the window counted, from which
// the Result is taken at algo.FixedWindow.At's time.
var fixedWindowBinding = bind(binding{file: "fixed_window.lua", letter: "f"},
	func(args []string, l algo.FixedWindow, cost int64) []string {
		return append(args, itoa(l.Window.Microseconds()), itoa(l.Count), itoa(cost))
	},
	func(algo.FixedWindow) int64 { return 1 },
	func(l algo.FixedWindow, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
		now = max(now, l.WindowStart(extra[0]))
		if !committed {
			return l.Result(true, now, val-cost, 0)
		}
		return l.Result(ok, now, val, cost)
	})

// calendarWindows appends, for a fixed window of the calendar, the windows
// around t (the request's time, or this machine's clock for Redis TIME's):
// their count, the start of the one before t's, then the ends of that one,
// t's and the next. Redis has no time zone data; it decides by its own
// clock in whichever of them holds its time (window_end), so that clocks
// apart by less than a window (a day at least) never count in the wrong
// one.
func calendarWindows(args []string, p *algo.Plan, t time.Time) []string {
	if p.Kind() != algo.KindFixedWindow {
		return args
	}
	l := limitOf[algo.FixedWindow](p)
	if l.Calendar == (algo.Calendar{}) {
		return args
	}
	if t.IsZero() {
		t = time.Now()
	}
	cur := l.WindowEnd(t.UnixMicro())
	prevEnd := l.WindowStart(cur)
	return append(args, "4", itoa(l.WindowStart(prevEnd)), itoa(prevEnd), itoa(cur), itoa(l.WindowEnd(cur)))
}
