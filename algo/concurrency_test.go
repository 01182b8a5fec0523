package algo

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// model is the obvious implementation of Concurrency: a list of holders,
// every lease compared with now on every decision.
type model struct {
	c       Concurrency
	holders []modelHolder
}

type modelHolder struct{ id, end, n int64 }

func (m *model) live(now int64) []modelHolder {
	var out []modelHolder
	for _, h := range m.holders {
		if h.end > now {
			out = append(out, h)
		}
	}
	return out
}

func (m *model) held(now int64) (n int64) {
	for _, h := range m.live(now) {
		n += h.n
	}
	return n
}

// decide returns allowed, admitted, held after and the retry (µs, -1 for
// Never, 0 when allowed).
//
// The model keeps holders whose lease has ended until a decision writes
// (the algorithm's sweep), so that a clock stepping back sees them as the
// algorithm does: held again, never freed early.
func (m *model) decide(now, cost, id int64, op SlotOp) (bool, int64, int64, int64) {
	all := m.holders
	m.holders = m.live(now)
	i := slices.IndexFunc(m.holders, func(h modelHolder) bool { return id != 0 && h.id == id })
	defer func() {
		if len(m.holders) == 0 {
			m.holders = nil
		}
	}()
	keep := func() { m.holders = all } // a decision that writes nothing
	switch {
	case op == Release && id != 0:
		if i < 0 {
			keep()
			return true, 0, m.held(now), 0
		}
		n := m.holders[i].n
		m.holders = slices.Delete(m.holders, i, i+1)
		return true, n, m.held(now), 0
	case op == Release:
		var order []int
		for j, h := range m.holders {
			if h.id == 0 {
				order = append(order, j)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int { return int(m.holders[a].end - m.holders[b].end) })
		var freed int64
		for _, j := range order {
			take := min(m.holders[j].n, cost-freed)
			m.holders[j].n -= take
			freed += take
		}
		if freed == 0 {
			keep()
		}
		m.holders = slices.DeleteFunc(m.holders, func(h modelHolder) bool { return h.n == 0 })
		return true, freed, m.held(now), 0
	case op == Renew || op == Acquire && i >= 0 && cost > 0:
		if i < 0 {
			keep()
			return false, 0, m.held(now), -1
		}
		m.holders[i].end = now + m.c.HoldFor.Microseconds()
		if op == Renew {
			return true, 0, m.held(now), 0
		}
		return true, cost, m.held(now), 0
	case cost == 0:
		keep()
		return true, 0, m.held(now), 0
	case cost > m.c.Count:
		keep()
		return false, 0, m.held(now), -1
	case m.held(now)+cost > m.c.Count:
		defer keep()
		ends := slices.Clone(m.holders)
		slices.SortFunc(ends, func(a, b modelHolder) int { return int(a.end - b.end) })
		need, freed := m.held(now)+cost-m.c.Count, int64(0)
		for _, h := range ends {
			if freed += h.n; freed >= need {
				return false, 0, m.held(now), h.end - now
			}
		}
		panic("unreachable")
	}
	m.holders = append(m.holders, modelHolder{id, now + m.c.HoldFor.Microseconds(), cost})
	return true, cost, m.held(now), 0
}

// TestConcurrencyAgainstModel runs random traces of acquires, renewals and
// releases, with and without ids, at times that sometimes step back, through the plan and the model: each
// decision's answer and Remaining must agree, and a check (commit false)
// must change nothing.
func TestConcurrencyAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 1))
	decisions := map[SlotOp]int{}
	for trace := range 300 {
		c := Concurrency{Count: 1 + r.Int64N(6), HoldFor: time.Duration(1+r.Int64N(50)) * time.Millisecond}
		base, err := Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{c: c}
		var s State
		now := int64(1_800_000_000_000_000)
		latest := now // the latest time seen: a lease may end HoldFor after it
		for step := range 200 {
			if r.IntN(8) == 0 {
				now -= r.Int64N(8000) // the clock steps back
			} else {
				now += r.Int64N(8000)
			}
			latest = max(latest, now)
			id, op, cost := r.Int64N(5), SlotOp(r.IntN(3)), r.Int64N(4)
			if op == Renew && id == 0 {
				id = 1
			}
			p := base
			if err := ForPermit(&p, id, op); err != nil {
				t.Fatal(err)
			}
			before := cloneState(s)
			check := p.Decide(&s, now, cost, false)
			if !sameState(before, s) {
				t.Fatalf("trace %d step %d: a check changed the state", trace, step)
			}
			got := p.Decide(&s, now, cost, true)
			if check.Allowed != got.Allowed {
				t.Fatalf("trace %d step %d: check %+v, decision %+v", trace, step, check, got)
			}
			ok, admitted, held, retry := m.decide(now, cost, id, op)
			wantRetry := time.Duration(retry) * time.Microsecond
			if retry < 0 {
				wantRetry = Never
			}
			if got.Allowed != ok || got.Admitted != admitted || got.Remaining != max(c.Count-held, 0) || got.RetryAfter != wantRetry || got.Quota != c.Count {
				t.Fatalf("trace %d step %d: %v id %d cost %d at %d: got %+v, model allowed %v admitted %d held %d retry %v",
					trace, step, op, id, cost, now, got, ok, admitted, held, wantRetry)
			}
			if held > 0 && (got.ResetAfter <= 0 || got.ResetAfter > c.HoldFor+time.Duration(latest-now)*time.Microsecond) || held == 0 && got.ResetAfter != 0 {
				t.Fatalf("trace %d step %d: held %d, ResetAfter %v", trace, step, held, got.ResetAfter)
			}
			if held > 0 && s.Expire <= now || len(s.Log) > 3*int(c.Count) {
				t.Fatalf("trace %d step %d: state %+v with %d held", trace, step, s, held)
			}
			decisions[op]++
		}
	}
	t.Log(decisions)
}

func TestConcurrencyBounds(t *testing.T) {
	for _, c := range []Concurrency{
		{Count: 0, HoldFor: time.Second}, {Count: MaxSlots + 1, HoldFor: time.Second},
		{Count: 1, HoldFor: 0}, {Count: 1, HoldFor: time.Microsecond}, {Count: 1, HoldFor: MaxHoldFor + 1},
	} {
		if _, err := Compile(c); err == nil {
			t.Errorf("%+v compiled", c)
		}
	}
	p, err := Compile(Concurrency{Count: 2, HoldFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		id int64
		op SlotOp
	}{{-1, Acquire}, {MaxPermitID + 1, Acquire}, {0, Renew}, {1, 7}} {
		if q := p; ForPermit(&q, bad.id, bad.op) == nil {
			t.Errorf("ForPermit(%d, %v) made a plan", bad.id, bad.op)
		}
	}
	g, _ := Compile(GCRA{Burst: 1, Count: 1, Period: time.Second})
	if ForPermit(&g, 1, Acquire) == nil {
		t.Error("a GCRA plan took a permit")
	}
	// A billion renewals would keep the state as it is: renew a permit
	// many times, and the state stays one holder.
	q, rn := p, p
	if ForPermit(&q, 9, Acquire) != nil || ForPermit(&rn, 9, Renew) != nil {
		t.Fatal("a permit refused")
	}
	var s State
	now := int64(1_800_000_000_000_000)
	if r := q.Decide(&s, now, 1, true); !r.Allowed {
		t.Fatal(r)
	}
	for i := range 100_000 {
		if r := rn.Decide(&s, now+int64(i), 0, true); !r.Allowed || r.Remaining != 1 {
			t.Fatalf("renewal %d: %+v", i, r)
		}
	}
	if len(s.Log) != 3 || s.A != 1 {
		t.Fatalf("after renewals: %+v", s)
	}
}
