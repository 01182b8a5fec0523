package algo

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// decideLimit is the reference a Plan's decision is checked against: the
// kind's own parts, called directly, without a Plan's dispatch. For a
// block, a debt (a Plan's own compositions) and a kind not listed here it
// is the Plan; conformance's hand-checked traces judge those.
func decideLimit(t *testing.T, l Limit, s *State, now, cost int64, commit bool) Result {
	switch l := l.(type) {
	case GCRA, TokenBucket:
		p, err := l.(interface{ tat() (TAT, error) }).tat()
		if err != nil {
			t.Fatal(err)
		}
		ok, tat := p.step(s, now, cost, commit)
		return p.Result(ok, now, tat, cost)
	case FixedWindow:
		now = l.at(s, now)
		end := l.WindowEnd(now)
		ok, count := l.step(s, now, end, cost, commit)
		return l.numbers(ok, now, end, count, cost).result(ok, cost)
	case Gate:
		ok, openAt := l.step(s, now, cost, commit)
		return l.Result(ok, now, openAt, cost)
	case SlidingLog:
		return l.decide(s, now, cost, commit)
	case WindowCounter:
		return l.decide(s, now, cost, commit)
	case Concurrency:
		var r Result
		l.decideFor(s, now, cost, commit, 0, Acquire, &r)
		return r
	}
	p, err := Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	return p.Decide(s, now, cost, commit)
}

// TestPlanDecidesAsTheLimit: for every kind, a compiled Plan gives the
// limit back and decides exactly as the kind's own parts do.
func TestPlanDecidesAsTheLimit(t *testing.T) {
	for _, k := range Kinds() {
		l := k.Example()
		{
			p, err := Compile(l)
			if err != nil {
				t.Fatalf("%v: %v", k, err)
			}
			if !reflect.DeepEqual(p.Limit(), l) || p.Kind() != k {
				t.Fatalf("%v: Plan.Limit() = %#v", k, p.Limit())
			}
			r := rand.New(rand.NewPCG(uint64(k), 7))
			var a, b State
			now := int64(1_800_000_000_000_000)
			for i := range 300 {
				now += r.Int64N(200_000)
				cost := r.Int64N(3)
				commit := r.IntN(4) != 0
				allows := p.Allows(&b, now, cost)
				want, got := decideLimit(t, l, &a, now, cost, commit), p.Decide(&b, now, cost, commit)
				if allows != want.Allowed {
					t.Fatalf("%v step %d: Allows %v, Decide %+v", k, i, allows, want)
				}
				if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(a, b) {
					t.Fatalf("%v step %d: plan %+v %+v, limit %+v %+v", k, i, got, b, want, a)
				}
				if commit { // DecideUnlock: the same decision, and mu unlocked
					c := a
					c.Log = slices.Clone(a.Log)
					want = decideLimit(t, l, &a, now, cost, true)
					var mu sync.Mutex
					mu.Lock()
					var got Result
					ok := p.DecideUnlock(&c, now, cost, &mu, &got)
					if !mu.TryLock() || ok != want.Allowed || !reflect.DeepEqual(want, got) || !reflect.DeepEqual(a, c) {
						t.Fatalf("%v step %d: DecideUnlock %v %+v %+v, Decide %+v %+v", k, i, ok, got, c, want, a)
					}
					b = a
					b.Log = slices.Clone(a.Log)
				}
			}
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	type embedded struct{ GCRA }
	var nilGCRA *GCRA
	for name, c := range map[string]struct {
		l    Limit
		want error
	}{
		"nil":            {nil, ErrInvalid},
		"a pointer":      {&GCRA{Count: 1, Period: time.Second}, ErrUnsupported},
		"nil pointer":    {nilGCRA, ErrUnsupported},
		"invalid":        {GCRA{Count: 0, Period: time.Second}, ErrInvalid},
		"another type":   {embedded{GCRA{Count: 1, Period: time.Second}}, ErrUnsupported},
		"another type 2": {embedded{GCRA{Count: 1, Period: time.Second}}, ErrInvalid},
	} {
		p := MustCompile(Gate{Interval: time.Second})
		if err := p.compile(c.l); !errors.Is(err, c.want) { // a plan used before keeps nothing
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if p.Limit() != nil {
			t.Errorf("%s: a refused compile left %+v", name, p.Limit())
		}
	}
}

// TestReserving: a reserving plan admits ahead by up to its wait, reports
// when the holder may act, and Undo gives the cost back.
func TestReserving(t *testing.T) {
	const T = 1_000_000 // 1 per second, 2 at once
	p, err := Compile(GCRA{Burst: 1, Count: 1, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Reserving(&p, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	now := int64(1_800_000_000_000_000)
	var delays []time.Duration
	for range 4 {
		res := r.Decide(&s, now, 1, true)
		if !res.Allowed {
			break
		}
		_, delay := Unreserved(&r, res, 1500*time.Millisecond, 1)
		delays = append(delays, delay)
	}
	if want := []time.Duration{0, 0, time.Second}; !reflect.DeepEqual(delays, want) {
		t.Fatalf("delays %v, want %v (the 4th is 2s away, past the 1.5s wait)", delays, want)
	}
	if s.A != now+3*T {
		t.Fatalf("TAT %d, want now+3T", s.A-now)
	}
	if err := p.Adjust(&s, now, Reward, 1); err != nil || s.A != now+2*T {
		t.Fatalf("after a reward of 1: TAT now+%d, %v", s.A-now, err)
	}
	p.Adjust(&s, now, Reward, 2)
	if !reflect.DeepEqual(s, State{Log: s.Log}) {
		t.Fatalf("given back to now: %+v, want no state", s)
	}
	fw, _ := Compile(FixedWindow{Count: 1, Window: time.Second})
	if _, err := Reserving(&fw, time.Second); !errors.Is(err, ErrUnsupported) {
		t.Errorf("fixed window Reserving: %v", err)
	}
}

func TestStateClear(t *testing.T) {
	s := State{Expire: 5, A: 1, B: 2, Shape: 3, Log: make([]int64, 2, 8)}
	s.clear(7)
	if s.Expire != 0 || s.A != 0 || s.B != 0 || s.Shape != 7 || len(s.Log) != 0 || cap(s.Log) != 8 {
		t.Fatalf("cleared to %+v (cap %d)", s, cap(s.Log))
	}
}

// TestShapeKeysAreStable: the Redis store names a state's key by its
// algorithm's stable name and layout (Plan.ShapeKey), never by a kind's
// number, so that a key written today is found by a later version; these
// names are part of the store's format. Every layout of one kind that a
// store must keep apart has a key of its own.
func TestShapeKeysAreStable(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{GCRA{Burst: 1, Count: 1, Period: time.Second}, ""},
		{TokenBucket{Burst: 1, Count: 1, Period: time.Second}, ""},
		{FixedWindow{Count: 5, Window: time.Minute}, "%:fixed_window"},
		{Gate{Interval: time.Second}, "%:gate"},
		{SlidingLog{Limits: []Window{{Count: 5, Window: time.Minute}}}, "%:sliding_log"},
		{SlidingLog{Limits: []Window{{Count: 5, Window: time.Minute}, {Count: 9, Window: time.Hour}}, Buckets: 10}, "%:sliding_log-sampled-10-6000000-360000000"},
		{WindowCounter{Slice: time.Second, Limits: []Window{{Count: 5, Window: time.Minute}}}, "%:window_counter-1000000-60-1"},
	} {
		p, err := Compile(c.l)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ShapeKey(); got != c.want {
			t.Errorf("%v: ShapeKey %q, want %q", c.l.Kind(), got, c.want)
		}
	}
	for _, k := range Kinds() {
		p, err := Compile(k.Example())
		if err != nil {
			t.Fatal(err)
		}
		if key := p.ShapeKey(); key != "" && !strings.HasPrefix(key, "%:"+k.String()) {
			t.Errorf("%v: ShapeKey %q does not start with the algorithm's name", k, key)
		}
	}
}

// TestUnreserved: a decision by a reserving plan, read by the original:
// the delay is the wait past the original tolerance, the numbers are the
// original plan's own, and they match what the original plan says of the
// same state once the delay has passed.
func TestUnreserved(t *testing.T) {
	for _, l := range []Limit{GCRA{Burst: 5, Count: 10, Period: time.Second}, TokenBucket{Burst: 6, Count: 10, Period: time.Second}} {
		orig, _ := Compile(l)
		const wait = 1500 * time.Millisecond
		res, err := Reserving(&orig, wait)
		if err != nil {
			t.Fatal(err)
		}
		var s State
		now := int64(1_800_000_000_000_000)
		for k := 1; k <= 22; k++ { // 22 at one instant: 6 at once, 15 delayed, 1 denied
			r := res.Decide(&s, now, 1, true)
			got, delay := Unreserved(&res, r, wait, 1)
			wantDelay := time.Duration(max(k-6, 0)) * 100 * time.Millisecond
			switch {
			case k <= 21 && (!got.Allowed || delay != wantDelay):
				t.Fatalf("%v, request %d: allowed %v after %v, want allowed after %v", l.Kind(), k, got.Allowed, delay, wantDelay)
			case k == 22 && (got.Allowed || got.RetryAfter != 100*time.Millisecond):
				t.Fatalf("%v, request 22: %+v, want denied, retry in 100ms", l.Kind(), got)
			}
			if k <= 21 {
				// The original plan's view of the same state at the time to act.
				var peek State = s
				at := now + delay.Microseconds()
				want := orig.Decide(&peek, at, 0, false)
				if got.Remaining != want.Remaining || got.Quota != want.Quota {
					t.Fatalf("%v, request %d: remaining %d of %d, want %d of %d", l.Kind(), k, got.Remaining, got.Quota, want.Remaining, want.Quota)
				}
			}
		}
	}
}

// TestInBatch: a nary log's plan in a batch is a binary copy, and the
// plan passed is unchanged; any other plan is itself.
func TestInBatch(t *testing.T) {
	nary := MustCompile(SlidingLog{Limits: []Window{{Count: 3, Window: time.Second}}, Mode: Nary})
	gate := MustCompile(Gate{Interval: time.Second})
	if InBatch(gate) != gate {
		t.Error("a gate's batch plan is not itself")
	}
	b := InBatch(nary)
	if b == nary || b.Limit().(SlidingLog).Mode != Binary || nary.Limit().(SlidingLog).Mode != Nary {
		t.Fatalf("batch plan %v, nary now %v", b.Limit(), nary.Limit())
	}
}

// TestCompileKeepsNoLimit: a plan shares no memory with the limit it was
// compiled from (its windows are copied), so a caller may change or reuse
// the limit, and a limit compiled at the call does not escape to the heap
// (TestNoAllocs in the root package).
func TestCompileKeepsNoLimit(t *testing.T) {
	ws := []Window{{Count: 3, Window: time.Second}}
	for _, l := range []Limit{SlidingLog{Limits: ws}, WindowCounter{Limits: ws}, Blocking{Limit: SlidingLog{Limits: ws}, Block: Block{For: time.Second}}} {
		p := MustCompile(l)
		before := fmt.Sprint(p.Limit())
		ws[0].Count = 7
		if after := fmt.Sprint(p.Limit()); after != before {
			t.Errorf("%T: the plan changed with its limit's windows: %s, was %s", l, after, before)
		}
		ws[0].Count = 3
	}
}
