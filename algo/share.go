package algo

import "math"

// Share is what a region knows of its share of a global fixed window (a
// limit across regions, charged at its home before a region spends it;
// store/redis global.go): Step says how much to ask home for or give back.
// Held units were charged at home, so whatever Step says, the regions
// together never hold more than the limit; Step only decides how well
// the limit is used.
type Share struct {
	Limit   int64   // the window's limit
	Held    int64   // units the region holds, charged at home and not yet admitted
	Rate    float64 // units the region asks for per µs, admitted or denied
	Left    int64   // µs to the window's end
	Horizon int64   // µs until units asked now are held: a refill's interval and a round trip to home
}

// Step returns the units to ask home for (ask) or to give back (back); one
// of them is 0. The region aims to hold what it would spend in two
// horizons, and never more than it can spend before the window ends: it
// asks when it holds less than one horizon's worth, and gives back what
// it holds beyond the rest of the window's worth, all of it when nothing
// is asked for (demand moved to other regions).
func (s Share) Step() (ask, back int64) {
	rate := max(s.Rate, 0)
	left := max(s.Left, 0)
	need := rate * float64(min(s.Horizon, left))
	keep := rate * float64(left)
	target := min(2*need, keep, float64(s.Limit))
	switch held := float64(s.Held); {
	case held < need:
		return max(int64(math.Ceil(target-held)), 1), 0
	case held > math.Ceil(keep+need):
		return 0, s.Held - int64(math.Ceil(keep))
	}
	return 0, 0
}
