package algo

import "slices"

// DenialHolds reports whether a denial by the plan's limit stands on its
// own until its RetryAfter has passed: deciding a denied cost leaves the
// state as it was, and from the time of the denial until RetryAfter later
// that cost, and any larger one, stays denied whatever else is decided
// meanwhile, since only time frees capacity and other decisions only take
// it. A store may then remember a denial and repeat it without reading
// the state (an over-limit cache). It holds for every algorithm but a
// sliding log in the nary or uniform mode, whose denials record.
func (p *Plan) DenialHolds() bool {
	return p.ok && (p.kind != KindSlidingLog || p.mode == Binary)
}

// Equal reports whether p and q decide alike: the same kind and
// parameters (a window's Name aside).
func (p *Plan) Equal(q *Plan) bool {
	return p.kind == q.kind && p.ok == q.ok && p.mode == q.mode && p.tat == q.tat &&
		p.a == q.a && p.b == q.b && p.d == q.d &&
		slices.EqualFunc(p.ws, q.ws, func(a, b Window) bool { return a.Limit == b.Limit && a.Window == b.Window })
}
