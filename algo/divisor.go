package algo

import "math/bits"

// A divisor divides decision times by a fixed number of µs with a
// multiplication instead of a division instruction, which a fixed-window
// decision waits for twice. It is the method of Granlund and Montgomery
// ("Division by invariant integers using multiplication", 1994, theorem
// 4.2) for dividends below 2⁵³, which every time a store accepts is
// (MaxTime is 2⁵²): with l = ⌈log₂ d⌉ and m = ⌊2^(53+l)/d⌋ + 1,
//
//	2^(53+l) < m·d ≤ 2^(53+l) + d ≤ 2^(53+l) + 2^l
//
// so ⌊n/d⌋ = ⌊n·m / 2^(53+l)⌋ for 0 ≤ n < 2⁵³; m < 2⁵⁴ + 1 and the
// product is below 2¹⁰⁸. Other dividends are divided as Go divides.
// TestDivisor and TestWindowEndByDivisor hold it to Go's division. What
// it pays: bench/NOTES.md, "What each micro-optimisation pays".
type divisor struct {
	d     int64  // ≥ 1
	m     uint64 // ⌊2^(53+l)/d⌋ + 1
	shift uint   // 53 + l
}

// dividendBits is the size of the dividends a divisor divides with m.
const dividendBits = 53

// newDivisor returns the divisor of d ≥ 1.
func newDivisor(d int64) divisor {
	l := uint(bits.Len64(uint64(d - 1))) // ⌈log₂ d⌉
	shift := dividendBits + l
	// 2^shift as a 128-bit number; hi < d, so the quotient fits.
	var hi, lo uint64
	if shift >= 64 {
		hi = 1 << (shift - 64)
	} else {
		lo = 1 << shift
	}
	q, _ := bits.Div64(hi, lo, uint64(d))
	return divisor{d: d, m: q + 1, shift: shift}
}

// div returns n/d, truncated as Go's division is.
func (v divisor) div(n int64) int64 {
	if uint64(n) >= 1<<dividendBits {
		return n / v.d
	}
	hi, lo := bits.Mul64(uint64(n), v.m)
	if v.shift >= 64 {
		return int64(hi >> (v.shift - 64))
	}
	return int64(hi<<(64-v.shift) | lo>>v.shift)
}

// end returns the end of the window of d µs that holds n: what
// FixedWindow.WindowEnd returns, n - n%d + d.
func (v divisor) end(n int64) int64 { return (v.div(n) + 1) * v.d }
