package algo

import "slices"

// DenialStands reports whether a denial by the plan's limit stands on its
// own until its RetryAfter has passed: deciding a denied cost leaves the
// state as it was, and from the time of the denial until RetryAfter later
// that cost, and any larger one, stays denied whatever else is decided
// meanwhile, since only time frees capacity and other decisions only take
// it. A store may then remember a denial and repeat it without reading
// the state (an over-limit cache). It is so for every algorithm but a
// sliding log in the nary or uniform mode, whose denials record, and a
// concurrency limit, whose slots come back when their holders release
// them; nor for a limit with debt, whose denials record the charge.
func (p *Plan) DenialStands() bool {
	return p.ok && !p.debt && p.kind != KindConcurrency && (p.kind != KindSlidingLog || p.sl.Mode == Binary)
}

// Equal reports whether p and q decide alike: the same kind and
// parameters (a window's Name aside).
func (p *Plan) Equal(q *Plan) bool {
	same := func(a, b Window) bool { return a.Count == b.Count && a.Window == b.Window }
	return p.kind == q.kind && p.ok == q.ok && p.debt == q.debt && p.tat == q.tat &&
		p.gcra == q.gcra && p.tb == q.tb && p.fw == q.fw && p.gate == q.gate && p.cc == q.cc &&
		p.permit == q.permit && p.op == q.op && (p.blk == nil) == (q.blk == nil) && (p.blk == nil || *p.blk == *q.blk) &&
		p.sl.MinGap == q.sl.MinGap && p.sl.Buckets == q.sl.Buckets && p.sl.Mode == q.sl.Mode &&
		slices.EqualFunc(p.sl.Limits, q.sl.Limits, same) &&
		p.wc.Slice == q.wc.Slice && slices.EqualFunc(p.wc.Limits, q.wc.Limits, same)
}
