package algo

import (
	"errors"
	"testing"
	"time"
)

// TestAdjust: penalties and rewards by hand, within the algorithms'
// bounds, and refused where there is no count to move.
func TestAdjust(t *testing.T) {
	t0 := int64(1_800_000_000_000_000)
	g, _ := Compile(GCRA{Burst: 4, Count: 1, Period: time.Second}) // 5 at once, 1 a second
	var s State
	g.Decide(&s, t0, 2, true)
	if err := g.Adjust(&s, t0, Penalize, 5); err != nil { // 2 + 5 > 5: past the limit
		t.Fatal(err)
	}
	if r := g.Decide(&s, t0, 0, false); r.Remaining != 0 || r.ResetAfter != 7*time.Second {
		t.Fatalf("after a penalty of 5: %+v", r)
	}
	if r := g.Decide(&s, t0+(2*time.Second).Microseconds(), 1, false); r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("2s on: %+v", r)
	}
	if err := g.Adjust(&s, t0, Reward, 1_000_000); err != nil { // far more than consumed
		t.Fatal(err)
	}
	if r := g.Decide(&s, t0, 0, false); r.Remaining != 5 {
		t.Fatalf("after a huge reward: %+v (remaining above the limit?)", r)
	}
	// A penalty of MaxCount stays within the horizon.
	if err := g.Adjust(&s, t0, Penalize, MaxCount); err != nil || s.A-t0 > MaxHorizon.Microseconds() {
		t.Fatalf("penalty of MaxCount: %v, TAT %d ahead", err, s.A-t0)
	}

	f, _ := Compile(FixedWindow{Count: 3, Window: 10 * time.Second})
	var w State
	f.Decide(&w, t0, 1, true)
	f.Adjust(&w, t0, Penalize, 5)
	if r := f.Decide(&w, t0, 0, false); r.Remaining != 0 {
		t.Fatalf("window after a penalty: %+v", r)
	}
	f.Adjust(&w, t0, Reward, 4) // 6 - 4 = 2
	if r := f.Decide(&w, t0, 1, true); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("window after a reward: %+v", r)
	}
	f.Adjust(&w, t0, Reward, 100)
	if r := f.Decide(&w, t0, 0, false); r.Remaining != 3 {
		t.Fatalf("window after a big reward: %+v", r)
	}

	for _, l := range []Limit{Gate{Interval: time.Second}, Concurrency{Count: 1, HoldFor: time.Second}} {
		p, _ := Compile(l)
		if err := p.Adjust(&State{}, t0, Penalize, 1); !errors.Is(err, ErrNotAdjustable) {
			t.Errorf("%v: %v", p.Kind(), err)
		}
	}
	for _, n := range []int64{0, -1, MaxCount + 1} {
		if err := g.Adjust(&State{}, t0, Reward, n); !errors.Is(err, ErrInvalid) {
			t.Errorf("%d units: %v", n, err)
		}
	}
}

// TestBlockForAndUnblock: an operator's block and unblock.
func TestBlockForAndUnblock(t *testing.T) {
	t0 := int64(1_800_000_000_000_000)
	p, _ := Compile(Blocking{Limit: GCRA{Burst: 9, Count: 1, Period: time.Second}, Block: Block{For: time.Second, Growth: 2}})
	var s State
	if err := p.BlockFor(&s, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := p.Decide(&s, t0+1, 1, true); r.Allowed || r.RetryAfter != time.Hour-time.Microsecond || r.DeniedBy != DeniedByBlock {
		t.Fatalf("blocked by hand: %+v", r)
	}
	if err := p.Unblock(&s); err != nil {
		t.Fatal(err)
	}
	if r := p.Decide(&s, t0+2, 1, true); !r.Allowed {
		t.Fatalf("unblocked: %+v", r)
	}
	if err := p.BlockFor(&s, t0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a zero block: %v", err)
	}
	g, _ := Compile(GCRA{Burst: 1, Count: 1, Period: time.Second})
	if err := g.BlockFor(&s, t0, time.Second); !errors.Is(err, ErrNoBlock) {
		t.Errorf("a block on a limit without one: %v", err)
	}
}
