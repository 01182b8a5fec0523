package algo

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDivisor divides by divisors of every size, at the dividends where a
// multiplicative division goes wrong first (around multiples of d, at
// the top of its range) and at random ones, against Go's division.
func TestDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ds := []int64{1, 2, 3, 5, 7, 10, 1000, 999_999, 1_000_000, 1_000_001, 60_000_000, 3_600_000_000, 86_400_000_000,
		MaxHorizon.Microseconds(), 1<<52 - 1, 1 << 52, 1<<53 - 1, 1 << 53, 1<<62 + 1, math.MaxInt64}
	for range 300 {
		ds = append(ds, 1+r.Int64N(1<<uint(1+r.IntN(62))))
	}
	const top = 1<<dividendBits - 1
	for _, d := range ds {
		v := newDivisor(d)
		check := func(n int64) {
			if got, want := v.div(n), n/d; got != want {
				t.Fatalf("divisor %d: %d / %d = %d, want %d (m %d, shift %d)", d, n, d, got, want, v.m, v.shift)
			}
		}
		for _, n := range []int64{0, 1, top, top - 1, top - d, top - top%d, top - top%d - 1, -1, -d, top + 1, math.MaxInt64, math.MinInt64} {
			check(n)
		}
		for range 2000 {
			n := r.Int64N(top + 1)
			check(n)
			if k := n / d * d; k > 0 {
				check(k)
				check(k - 1)
			}
		}
	}
}

// TestWindowEndByDivisor: a fixed window's plan finds the window's end
// as FixedWindow.WindowEnd does, for every time.
func TestWindowEndByDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, w := range []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Minute, 7 * time.Hour, MaxHorizon} {
		f := FixedWindow{Count: 10, Window: w}
		p := MustCompile(f)
		for range 5000 {
			now := r.Int64N(MaxTime + 1)
			if r.IntN(10) == 0 {
				now = r.Int64() - r.Int64() // beyond what stores accept: Go's division
			}
			if got, want := p.win.end(now), f.WindowEnd(now); got != want {
				t.Fatalf("window %v at %d: end %d, want %d", w, now, got, want)
			}
		}
	}
}

func BenchmarkWindowEnd(b *testing.B) {
	f := FixedWindow{Count: 10, Window: time.Hour}
	p, _ := Compile(f)
	now := int64(1795448029911637)
	b.Run("divisor", func(b *testing.B) {
		for b.Loop() {
			now = p.win.end(now) - 12345
		}
	})
	b.Run("division", func(b *testing.B) {
		for b.Loop() {
			now = f.WindowEnd(now) - 12345
		}
	})
}
