// Package clock is the monotonic clock decisions read: nanoseconds since
// the process started, as time.Since(start) gives them, at under half its
// cost where the CPU's time-stamp counter can be trusted.
//
// On linux/amd64, when the kernel keeps its own clock on the time-stamp
// counter (clocksource "tsc": a counter at a constant rate, in step on
// every CPU), Now reads the counter and scales it from an anchor:
//
//	now = anchor.ns + (tsc - anchor.tsc) · mult / 2³²
//
// A scale holds for 100 ms; the first read after that takes a new anchor.
// mult is the rate measured between the last two anchors, ticks against
// the nanoseconds the monotonic clock counted, so the clock follows the
// kernel's rate adjustments (NTP). A new anchor continues from where the
// old scale had the clock, and its rate is bent so that the gap to the
// monotonic clock closes over the next 100 ms; a gap of more than 1 ms (a
// VM restored from a snapshot, a counter that jumped) is closed at once,
// the one case in which the clock steps back.
//
// Until the first 10 ms have been measured, and wherever the counter
// cannot be trusted, Now is time.Since(start). The kernel is asked again
// every 64 scales (about 6 s of use): when its watchdog has moved its
// clock off the counter, this clock leaves it too.
package clock

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// start is the clock's origin.
var start = time.Now()

// mono is the monotonic clock, in ns since start.
func mono() int64 { return int64(time.Since(start)) }

const (
	// interval is the longest a scale holds.
	interval = int64(100 * time.Millisecond)
	// firstAfter is how long the first rate is measured over.
	firstAfter = int64(10 * time.Millisecond)
	// maxGap is the largest gap to the monotonic clock that a new scale
	// closes by bending its rate; a larger one it closes at once.
	maxGap = int64(time.Millisecond)
	// maxJitter bounds how long reading the counter between two reads of
	// the monotonic clock may take for the pair to be used: a thread
	// preempted in between would measure a wrong rate.
	maxJitter = int64(2 * time.Microsecond)
)

// A scale turns counter readings into the clock; it is never changed
// once published.
type scale struct {
	tsc   uint64 // the counter at the anchor
	ns    int64  // the clock at the anchor
	mult  uint64 // ns per tick · 2³²
	ticks uint64 // how many ticks past the anchor the scale holds
}

// at is the clock at counter c, for c within the scale's span.
func (s *scale) at(c uint64) int64 { return s.ns + int64((c-s.tsc)*s.mult>>32) }

var (
	// trusted reports whether the kernel keeps its own clock on the
	// counter: asked at start, and again every recheckEvery scales.
	trusted = counterTrusted
	// useCounter is whether Now may read the counter.
	useCounter atomic.Bool
	cur        atomic.Pointer[scale]
	// busy is held by the goroutine taking a new anchor; ref is the
	// sample (counter, monotonic clock) the next rate is measured from,
	// and scales counts the scales published.
	busy    atomic.Bool
	haveRef bool
	refTSC  uint64
	refNS   int64
	scales  int
)

// recheckEvery is how many scales (of 100 ms) pass between two questions
// to the kernel: whether its clock is still on the counter. Its watchdog
// moves it off a counter it finds unstable, and so does this clock then.
const recheckEvery = 64

func init() { useCounter.Store(trusted()) }

// Now returns the clock: nanoseconds since the process started. It does
// not go back by more than a few nanoseconds (while a new scale is
// published), but for a gap of over 1 ms (see the package comment).
func Now() int64 {
	if s := cur.Load(); s != nil {
		if c := rdtsc(); c-s.tsc < s.ticks {
			return s.at(c)
		}
	}
	return slow()
}

// slow takes a new anchor when the counter is in use and no other
// goroutine is taking one. Otherwise (or when this goroutine was preempted
// while it read the pair to anchor at) it stays on the old scale a little
// past its span rather than switch clocks; with no scale, it reads the
// monotonic clock.
func slow() int64 {
	if !useCounter.Load() {
		return mono()
	}
	if busy.CompareAndSwap(false, true) {
		a := mono()
		c := rdtsc()
		b := mono()
		if b-a <= maxJitter {
			n := rescale(c, a+(b-a)/2)
			busy.Store(false)
			return n
		}
		busy.Store(false)
	}
	if s := cur.Load(); s != nil {
		if c := rdtsc(); c-s.tsc < 2*s.ticks {
			return s.at(c)
		}
	}
	return mono()
}

// rescale publishes a scale anchored at counter c, read at monotonic time
// now, and returns the clock there. It runs under busy.
func rescale(c uint64, now int64) int64 {
	old := cur.Load()
	if !haveRef || c <= refTSC || now <= refNS {
		haveRef, refTSC, refNS = true, c, now // (re)start measuring
		old = nil
	}
	var mult uint64
	if elapsed := now - refNS; elapsed >= firstAfter {
		// elapsed·2³²/ticks, which fits unless the counter is slower
		// than a tick in 4 s or faster than 2³² ticks a ns: no counter to
		// use.
		ticks := c - refTSC
		hi, lo := bits.Mul64(uint64(elapsed), 1<<32)
		if hi < ticks {
			mult, _ = bits.Div64(hi, lo, ticks)
		}
		refTSC, refNS = c, now
		if mult == 0 {
			return now
		}
	} else if old != nil {
		mult = old.mult // too soon to measure: keep the rate
	} else {
		return now
	}
	anchor := now
	if old != nil && c > old.tsc {
		// Where the old scale has the clock at c (the 128-bit product:
		// c may be far past its span).
		h, l := bits.Mul64(c-old.tsc, old.mult)
		if h < 1<<31 {
			v := old.ns + int64(h<<32|l>>32)
			if gap := now - v; gap >= -maxGap && gap <= maxGap {
				// Continue from v, bent to meet the monotonic clock
				// interval from now.
				anchor = v
				mult = uint64(int64(mult) + int64(mult)*gap/interval)
			}
		}
	}
	if scales++; scales%recheckEvery == 0 && !trusted() {
		useCounter.Store(false)
		cur.Store(nil)
		return now
	}
	// interval·2³²/mult ticks (mult > 0, and interval < 2³² ns).
	hi, lo := bits.Mul64(uint64(interval), 1<<32)
	holds, _ := bits.Div64(hi, lo, mult)
	cur.Store(&scale{tsc: c, ns: anchor, mult: mult, ticks: holds})
	return anchor
}
