package algo

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBlockLengths(t *testing.T) {
	b := Block{For: 30 * time.Second, Growth: 2, Max: time.Hour}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := time.Duration(b.length(int64(i+1))) * time.Microsecond; got != w {
			t.Errorf("block %d: %v, want %v", i+1, got, w)
		}
	}
	if got := time.Duration(Block{For: time.Second, Growth: 1.5, Max: time.Minute}.length(3)) * time.Microsecond; got != 2250*time.Millisecond {
		t.Errorf("growth 1.5, third block: %v", got)
	}
	if got := time.Duration(Block{For: time.Second}.length(500)) * time.Microsecond; got != time.Second {
		t.Errorf("growth 1: %v", got)
	}
	if got := time.Duration(Block{For: time.Millisecond, Growth: 1.001, Max: MaxBlock}.length(maxBlockCount)) * time.Microsecond; got <= time.Millisecond || got > MaxBlock {
		t.Errorf("a long row: %v", got)
	}
}

// TestBlockingDecides: a GCRA of 2 at once with a block of 10s, growth 3,
// max 1m, forget_after 1m, by hand.
func TestBlockingDecides(t *testing.T) {
	l := Blocking{Limit: GCRA{Burst: 1, Count: 1, Period: time.Hour}, Block: Block{For: 10 * time.Second, Growth: 3, Max: time.Minute, ForgetAfter: time.Minute}}
	p, err := Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	if p.stepwise || p.Kind() != KindGCRA || p.Limit().(Blocking).Block != l.Block {
		t.Fatalf("plan %+v", p)
	}
	var s State
	t0 := int64(1_800_000_000_000_000)
	at := func(d time.Duration) int64 { return t0 + d.Microseconds() }
	step := func(d time.Duration, cost int64, ok bool, retry time.Duration) {
		t.Helper()
		r := p.Decide(&s, at(d), cost, true)
		if r.Allowed != ok || !ok && r.RetryAfter != retry || !s.Live(at(d)) {
			t.Fatalf("at %v cost %d: %+v (state %+v), want allowed %v retry %v", d, cost, r, s, ok, retry)
		}
	}
	step(0, 1, true, 0)
	step(0, 1, true, 0)
	step(time.Second, 1, false, 10*time.Second)  // over: a 10s block, to 11s
	step(5*time.Second, 1, false, 6*time.Second) // during: not extended
	step(5*time.Second, 0, false, 6*time.Second) // even a peek
	if s.Block.Count != 1 || s.Block.Until != at(11*time.Second) {
		t.Fatalf("block %+v", s.Block)
	}
	step(11*time.Second, 1, false, 30*time.Second) // the GCRA still denies: a second block, 3x
	step(41*time.Second, 1, false, 60*time.Second) // a third: 90s, capped at 1m
	if s.Block.Count != 3 {
		t.Fatalf("block %+v", s.Block)
	}
	// Forgotten a minute after the last ended (at 1m41s): a first block again.
	step(2*time.Minute+42*time.Second, 5, false, 10*time.Second)
	if s.Block.Count != 1 {
		t.Fatalf("after forget_after: %+v", s.Block)
	}
	// A check (commit false) neither starts nor extends a block.
	var fresh State
	q, _ := Compile(Blocking{Limit: GCRA{Burst: 0, Count: 1, Period: time.Hour}, Block: Block{For: time.Second}})
	q.Decide(&fresh, t0, 1, true)
	if r := q.Decide(&fresh, t0, 1, false); r.Allowed || fresh.Block.Until != 0 {
		t.Fatalf("a check: %+v %+v", r, fresh)
	}
	if by := p.Limit().deniedBy(DeniedByBlock); by != "block" {
		t.Errorf("DeniedBy = %q", by)
	}
}

func TestBlockBounds(t *testing.T) {
	g := GCRA{Burst: 1, Count: 1, Period: time.Second}
	for _, b := range []Block{
		{}, {For: -time.Second}, {For: time.Microsecond}, {For: MaxBlock + 1},
		{For: time.Second, Growth: 0.5}, {For: time.Second, Growth: 1e18},
		{For: time.Minute, Max: time.Second}, {For: time.Second, Max: 2 * MaxBlock},
		{For: time.Second, ForgetAfter: -1}, {For: time.Second, ForgetAfter: 2 * MaxBlock},
	} {
		if _, err := Compile(Blocking{Limit: g, Block: b}); err == nil {
			t.Errorf("%+v compiled", b)
		}
	}
	if _, err := Compile(Blocking{Limit: Blocking{Limit: g, Block: Block{For: time.Second}}, Block: Block{For: time.Second}}); err == nil {
		t.Error("a block of a block compiled")
	}
	// A spec's JSON that writes growth 0 is refused, as 0.5 is; left out,
	// it is 1.
	for src, want := range map[string]string{
		`{"for": "1s", "growth": 0}`:   "block growth must be 1 to 1000, got 0 (leave it out for 1)",
		`{"for": "1s", "growth": 0.0}`: "block growth must be 1 to 1000, got 0 (leave it out for 1)",
		`{"for": "1s", "growth": 0.5}`: "block growth must be 1 to 1000, got 0.5",
		`{"for": "1s"}`:                "",
	} {
		var b Block
		err := json.Unmarshal([]byte(src), &b)
		if err == nil {
			_, err = Compile(Blocking{Limit: g, Block: b})
		}
		if want == "" && err != nil || want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}

// TestRefreshKeepsALiveBlock: a state whose algorithm's part expired is
// cleared but for a block that still matters (its count goes on), and a
// block that stopped mattering is forgotten; another shape clears all.
// (Refresh and Clear write the block only when there is one: see
// clearBlock.)
func TestRefreshKeepsALiveBlock(t *testing.T) {
	blk := BlockState{Until: 100, Count: 3, Expire: 200}
	s := State{Expire: 50, A: 7, B: 8, Shape: 1, Log: []int64{1}, Block: blk}
	s.Refresh(1, 60)
	if s.Expire != 0 || s.A != 0 || s.B != 0 || len(s.Log) != 0 || s.Block != blk || !s.Live(60) {
		t.Fatalf("expired state, live block: %+v", s)
	}
	s.Refresh(1, 200)
	if s.Block != (BlockState{}) || s.Live(200) {
		t.Fatalf("block past its expiry: %+v", s)
	}
	s = State{Expire: 500, Shape: 1, Block: blk}
	s.Refresh(1, 60)
	if s.Expire != 500 || s.Block != blk {
		t.Fatalf("a live state changed: %+v", s)
	}
	s.Refresh(2, 60)
	if s.Shape != 2 || s.Expire != 0 || s.Block != (BlockState{}) {
		t.Fatalf("another shape: %+v", s)
	}
}
