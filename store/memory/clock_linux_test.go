package memory

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestClockOrderAcrossCPUs passes a token around a ring of goroutines,
// each locked to a thread pinned to its own CPU (round robin over the
// machine's), and each reads the store's clock once it holds the token: a
// reading that happens after another (the channel orders them) must not
// be earlier, whichever CPU took it. A clock that corrects itself by
// stepping back, or reads per-CPU counters that are out of step, fails
// here. (Nanosecond reorderings of an unordered counter read, which the
// store no longer makes, hide inside a handoff of microseconds.)
func TestClockOrderAcrossCPUs(t *testing.T) {
	s := New(WithSweepEvery(0))
	defer s.Close()
	const players, rounds = 4, 10_000
	ncpu := runtime.NumCPU()
	ring := make([]chan int64, players)
	for i := range ring {
		ring[i] = make(chan int64, 1) // one token: a send never waits
	}
	backs := make([]int, players)
	var wg sync.WaitGroup
	for i := range players {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(i % ncpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.Errorf("pinning to CPU %d: %v", i%ncpu, err)
			}
			in, out := ring[i], ring[(i+1)%players]
			for range rounds {
				last := <-in
				now := s.now()
				if now < last {
					backs[i]++
				}
				out <- now
			}
		})
	}
	ring[0] <- s.now()
	wg.Wait()
	for i, n := range backs {
		if n > 0 {
			t.Errorf("on CPU %d the clock read earlier than the reading before it %d times", i%ncpu, n)
		}
	}
}
