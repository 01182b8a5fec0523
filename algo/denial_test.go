package algo

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomLimit returns a random limit of kind k: for a kind it has no
// generator for, the kind's example (so every kind is checked).
func randomLimit(r *rand.Rand, k Kind) Limit {
	ms := func(n int64) time.Duration { return time.Duration(1+r.Int64N(n)) * time.Millisecond }
	switch k {
	case KindGCRA:
		return GCRA{Burst: r.Int64N(8), Count: 1 + r.Int64N(8), Period: ms(2000)}
	case KindTokenBucket:
		return TokenBucket{Burst: 1 + r.Int64N(8), Count: 1 + r.Int64N(8), Period: ms(2000)}
	case KindFixedWindow:
		return FixedWindow{Count: 1 + r.Int64N(8), Window: ms(2000)}
	case KindGate:
		return Gate{Interval: ms(1000)}
	case KindSlidingLog:
		return randomLog(r)
	case KindWindowCounter:
		return randomCounter(r)
	case KindConcurrency:
		return Concurrency{Count: 1 + r.Int64N(8), HoldFor: ms(2000)}
	}
	return k.Example()
}

// TestDenialStands is what an over-limit cache relies on: for a plan whose
// DenialStands, a denied decision leaves the state as it was, and until its
// RetryAfter has passed the same cost and a larger one stay denied, while
// other decisions (admissions among them) go on at later times. For the
// modes whose denials record, DenialStands is false.
func TestDenialStands(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 11))
	checked := 0
	for trace := range 1200 {
		k := Kind(trace % NumKinds)
		l := randomLimit(r, k)
		p, err := Compile(l)
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if sl, ok := l.(SlidingLog); ok && sl.Mode != Binary {
			if p.DenialStands() {
				t.Fatalf("%+v: DenialStands for mode %v", l, sl.Mode)
			}
			continue
		}
		if k == KindConcurrency { // a release frees slots at any time
			if p.DenialStands() {
				t.Fatalf("%+v: DenialStands", l)
			}
			continue
		}
		if !p.DenialStands() {
			t.Fatalf("%+v: DenialStands is false", l)
		}
		var s State
		now := int64(1800003000334587) + r.Int64N(1e9)
		for range 40 {
			now += r.Int64N(300_000)
			cost := r.Int64N(4)
			before := cloneState(s)
			res := p.Decide(&s, now, cost, true)
			if res.Allowed || res.RetryAfter == Never {
				continue
			}
			if !sameState(before, s) {
				t.Fatalf("%+v cost %d: a denial changed the state", l, cost)
			}
			checked++
			// Other decisions and probes at later times before now+wait.
			probe, at, end := cloneState(s), now, now+res.RetryAfter.Microseconds()
			for at < end {
				if r.IntN(2) == 0 {
					p.Decide(&probe, at, r.Int64N(3), true)
				}
				c := cost + r.Int64N(2)
				if got := p.Decide(&probe, at, c, false); got.Allowed {
					t.Fatalf("%+v: cost %d denied at %d for %v, but cost %d allowed at %d (%+v)", l, cost, now, res.RetryAfter, c, at, got)
				}
				at += 1 + r.Int64N(end-at)
			}
		}
	}
	if checked < 2000 {
		t.Fatalf("only %d denials checked", checked)
	}
}

func TestPlanEqual(t *testing.T) {
	a, _ := Compile(SlidingLog{Limits: []Window{{Name: "a", Count: 3, Window: time.Second}}})
	b, _ := Compile(SlidingLog{Limits: []Window{{Name: "b", Count: 3, Window: time.Second}}})
	c, _ := Compile(SlidingLog{Limits: []Window{{Count: 4, Window: time.Second}}})
	d, _ := Compile(SlidingLog{Limits: []Window{{Count: 3, Window: time.Second}}, MinGap: time.Millisecond})
	g1, _ := Compile(GCRA{Burst: 3, Count: 1, Period: time.Second})
	g2, _ := Compile(GCRA{Burst: 4, Count: 1, Period: time.Second})
	if !a.Equal(&b) || a.Equal(&c) || a.Equal(&d) || g1.Equal(&g2) || !g1.Equal(&g1) || a.Equal(&g1) {
		t.Fatal("Equal compares the wrong parameters")
	}
}

// TestPlanEqualEveryKind: over random limits of every kind, two plans are
// Equal exactly when their specs are, window names aside, so that a kind
// whose parameters Equal does not compare fails here.
func TestPlanEqualEveryKind(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	unnamed := func(p *Plan) Spec {
		s := p.Limit().Spec()
		for i := range s.Limits {
			s.Limits[i].Name = ""
		}
		return s
	}
	for _, k := range Kinds() {
		differ := 0
		for range 200 {
			a, err1 := Compile(randomLimit(r, k))
			b, err2 := Compile(randomLimit(r, k))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			same := reflect.DeepEqual(unnamed(&a), unnamed(&b))
			if a.Equal(&b) != same || !a.Equal(&a) {
				t.Fatalf("%v: %+v Equal %+v is %v", k, a.Limit(), b.Limit(), a.Equal(&b))
			}
			if !same {
				differ++
			}
		}
		if differ < 100 {
			t.Fatalf("%v: only %d pairs of 200 differ", k, differ)
		}
	}
}
