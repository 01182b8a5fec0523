package clock

import (
	"sync"
	"testing"
	"time"
)

// tolerance is how far Now may be from the monotonic clock read around
// it: the rate is measured from pairs read within maxJitter, and a scale
// holds no longer than the rate was measured over.
const tolerance = 50 * int64(time.Microsecond)

// follow reads Now between two reads of the monotonic clock for d, and
// fails when it falls outside them by more than tolerance or goes back by
// more than a microsecond. It returns how many reads used a scale.
func follow(t *testing.T, d time.Duration) (scaled int) {
	t.Helper()
	last := int64(-1 << 62)
	for end := mono() + int64(d); ; {
		a := mono()
		n := Now()
		b := mono()
		if n < a-tolerance || n > b+tolerance {
			t.Fatalf("Now() = %d, outside the monotonic clock's [%d, %d] by more than %d ns", n, a, b, tolerance)
		}
		if n < last-int64(time.Microsecond) {
			t.Fatalf("Now() went back from %d to %d", last, n)
		}
		last = n
		if cur.Load() != nil {
			scaled++
		}
		if b > end {
			return scaled
		}
	}
}

// TestFollowsTheMonotonicClock reads the clock across several anchors.
// On a machine whose kernel clock is the counter, it must end up reading
// the counter.
func TestFollowsTheMonotonicClock(t *testing.T) {
	scaled := follow(t, 350*time.Millisecond)
	if useCounter.Load() && scaled == 0 {
		t.Fatal("the counter is trusted but no read used it")
	}
	t.Logf("counter trusted: %v; reads on a scale: %d", useCounter.Load(), scaled)
}

// TestConcurrentReads reads from 8 goroutines at once, across anchors
// that several of them race to take (run with -race).
func TestConcurrentReads(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { follow(t, 250*time.Millisecond) })
	}
	wg.Wait()
}

// TestClosesALargeGap publishes a scale that runs twice too fast, as a
// counter that jumped would look: once it expires, the clock is back on
// the monotonic clock at once.
func TestClosesALargeGap(t *testing.T) {
	if !useCounter.Load() {
		t.Skip("the counter is not in use here")
	}
	follow(t, 30*time.Millisecond) // a first scale
	waitIdle()
	s := cur.Load()
	if s == nil {
		t.Fatal("no scale after 30 ms")
	}
	c := rdtsc()
	bad := &scale{tsc: c, ns: s.at(c), mult: 2 * s.mult, ticks: s.ticks / 20} // 5 ms at most
	cur.Store(bad)
	time.Sleep(10 * time.Millisecond)
	next := waitNext(t, bad)
	// The new scale starts at the monotonic clock, not where the fast one
	// had got to (10 ms ahead and more), and the clock follows it.
	if v := bad.at(next.tsc); v-next.ns < 5*int64(time.Millisecond) {
		t.Fatalf("the new scale starts %d ns before the fast one's reading there: it continued from it", v-next.ns)
	}
	follow(t, 10*time.Millisecond)
}

// waitNext reads the clock until a scale other than old is published,
// and returns it.
func waitNext(t *testing.T, old *scale) *scale {
	t.Helper()
	for deadline := mono() + int64(time.Second); mono() < deadline; {
		Now()
		if s := cur.Load(); s != old {
			return s
		}
	}
	t.Fatal("no new scale within a second")
	return nil
}

// TestBendsASmallGap publishes a scale that is 200 µs behind: the next
// one continues from it, still behind, and closes the gap over the
// following interval, never going back.
func TestBendsASmallGap(t *testing.T) {
	if !useCounter.Load() {
		t.Skip("the counter is not in use here")
	}
	follow(t, 30*time.Millisecond)
	waitIdle()
	s := cur.Load()
	if s == nil {
		t.Fatal("no scale after 30 ms")
	}
	c := rdtsc()
	behind := &scale{tsc: c, ns: s.at(c) - 200*int64(time.Microsecond), mult: s.mult, ticks: s.ticks / 20}
	cur.Store(behind)
	last := Now()
	next := waitNext(t, behind)
	// The new scale starts where the one behind had the clock, and runs
	// faster.
	if d := next.ns - behind.at(next.tsc); d < -int64(time.Microsecond) || d > int64(time.Microsecond) {
		t.Fatalf("the new scale starts %d ns off the one behind: it stepped instead of continuing", d)
	}
	if next.mult <= behind.mult {
		t.Fatalf("the new scale's rate %d is not above the old one's %d", next.mult, behind.mult)
	}
	deadline := mono() + 3*interval
	for {
		n := Now()
		if n < last-int64(time.Microsecond) {
			t.Fatalf("Now() went back from %d to %d", last, n)
		}
		last = n
		if m := mono(); n >= m-tolerance && n <= m+tolerance {
			break
		} else if m > deadline {
			t.Fatalf("still %d ns behind the monotonic clock after %d ns", m-n, 3*interval)
		}
	}
}

// TestWithoutTheCounter is the clock where the counter cannot be
// trusted: the monotonic clock, and no scale.
func TestWithoutTheCounter(t *testing.T) {
	waitIdle()
	saved, old := useCounter.Load(), cur.Load()
	useCounter.Store(false)
	cur.Store(nil)
	defer func() { useCounter.Store(saved); cur.Store(old) }()
	follow(t, 20*time.Millisecond)
	if cur.Load() != nil {
		t.Fatal("a scale was published without the counter")
	}
}

// TestLeavesAnUntrustedCounter: when the kernel moves its clock off the
// counter, the next check (due at the next scale here) takes this clock
// off it too.
func TestLeavesAnUntrustedCounter(t *testing.T) {
	if !useCounter.Load() {
		t.Skip("the counter is not in use here")
	}
	follow(t, 30*time.Millisecond)
	for !busy.CompareAndSwap(false, true) {
	}
	savedTrusted := trusted
	trusted = func() bool { return false }
	scales = recheckEvery - 1
	s := cur.Load()
	c := rdtsc()
	cur.Store(&scale{tsc: c, ns: s.at(c), mult: s.mult, ticks: 1}) // expires at once
	busy.Store(false)
	defer func() {
		for !busy.CompareAndSwap(false, true) {
		}
		trusted = savedTrusted
		useCounter.Store(true)
		busy.Store(false)
	}()
	follow(t, 20*time.Millisecond)
	if useCounter.Load() || cur.Load() != nil {
		t.Fatalf("still on the counter (in use: %v) after the kernel left it", useCounter.Load())
	}
}

// waitIdle waits until no goroutine is taking an anchor, and holds none.
func waitIdle() {
	for !busy.CompareAndSwap(false, true) {
	}
	busy.Store(false)
}

func BenchmarkNow(b *testing.B) {
	Now()
	time.Sleep(15 * time.Millisecond) // past the first measurement
	b.Run("clock.Now", func(b *testing.B) {
		var sink int64
		for b.Loop() {
			sink += Now()
		}
		_ = sink
	})
	b.Run("time.Since", func(b *testing.B) {
		var sink int64
		for b.Loop() {
			sink += mono()
		}
		_ = sink
	})
	b.Run("time.Now", func(b *testing.B) {
		var sink int64
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
		_ = sink
	})
}
