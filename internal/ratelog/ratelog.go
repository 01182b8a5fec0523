// Package ratelog lets one log line through per interval and counts the
// lines it held back, so that a failing store cannot flood the log.
package ratelog

import (
	"sync/atomic"
	"time"
)

// Every lets one event through per Interval (one second when zero). Its
// zero value is ready to use and it is safe for concurrent use.
type Every struct {
	Interval time.Duration
	last     atomic.Int64 // unix ns of the last event let through
	withheld atomic.Uint64
}

// Allow reports whether an event at now may be logged, and if so how many
// were held back since the last one that was.
func (l *Every) Allow(now time.Time) (withheld uint64, ok bool) {
	every := l.Interval
	if every <= 0 {
		every = time.Second
	}
	t := now.UnixNano()
	last := l.last.Load()
	if last != 0 && t-last < int64(every) || !l.last.CompareAndSwap(last, t) {
		l.withheld.Add(1)
		return 0, false
	}
	return l.withheld.Swap(0), true
}
