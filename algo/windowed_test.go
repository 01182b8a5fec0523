package algo

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// The windowed algorithms against naive models written from their doc
// comments: every recorded action kept (no ring, no trimming, no
// compaction), counts recomputed from scratch.

type naiveLog struct {
	times   []int64           // exact: one per recorded action
	buckets []map[int64]int64 // sampled: per limit, bucket -> count
	clock   int64
	has     bool
}

func (n *naiveLog) decide(l SlidingLog, now, cost int64) Result {
	k := len(l.Limits)
	if n.buckets == nil {
		n.buckets = make([]map[int64]int64, k)
		for i := range n.buckets {
			n.buckets[i] = map[int64]int64{}
		}
	}
	e := now
	if n.has {
		e = max(now, n.clock)
	}
	counts := func() []int64 {
		c := make([]int64, k)
		for i, w := range l.Limits {
			if l.Buckets == 0 {
				for _, t := range n.times {
					if t > e-w.Window.Microseconds() {
						c[i]++
					}
				}
			} else {
				bw := l.BucketWidth(i)
				for b, x := range n.buckets[i] {
					if b >= e/bw-l.Buckets {
						c[i] += x
					}
				}
			}
		}
		return c
	}
	c := counts()
	last, hasLast := n.clock, n.has
	gapOK := !hasLast || l.MinGap == 0 || e-last >= l.MinGap.Microseconds()
	fits, room, lmax := true, cost, int64(0)
	for i, w := range l.Limits {
		if c[i]+cost > w.Count {
			fits = false
		}
		room = min(room, w.Count-c[i])
		lmax = max(lmax, w.Count)
	}
	var admitted, record int64
	if cost > 0 {
		switch l.Mode {
		case Nary:
			if gapOK {
				admitted = max(room, 0)
			}
			record = admitted
		case Uniform:
			if fits && gapOK {
				admitted = cost
			}
			record = min(cost, lmax)
		default:
			if fits && gapOK {
				admitted = cost
			}
			record = admitted
		}
	}
	if record > 0 {
		if l.Buckets == 0 {
			for range record {
				n.times = append(n.times, e)
			}
		} else {
			for i := range l.Limits {
				n.buckets[i][e/l.BucketWidth(i)] += record
			}
		}
		n.clock, n.has = e, true
		last, hasLast = e, true
	}
	c = counts()
	over := false // a peek is denied while a count is above its limit
	for i, w := range l.Limits {
		over = over || c[i] > w.Count
	}
	r := Result{Allowed: admitted == cost && !(cost == 0 && over), Admitted: admitted, Quota: l.minLimit()}
	r.Remaining = l.Limits[0].Count - c[0]
	for i, w := range l.Limits {
		r.Remaining = min(r.Remaining, w.Count-c[i])
	}
	if l.Mode != Uniform {
		r.Remaining = max(r.Remaining, 0)
	}
	var reset int64
	if hasLast {
		if l.Buckets == 0 {
			reset = last + l.maxWindow()
		} else {
			for i := range l.Limits {
				bw := l.BucketWidth(i)
				reset = max(reset, (n.clock/bw+l.Buckets+1)*bw)
			}
		}
	}
	if reset > now {
		r.ResetAfter = time.Duration(reset-now) * time.Microsecond
	}
	if !r.Allowed {
		var wait int64
		by := 0
		for i, w := range l.Limits {
			if cost > w.Count {
				r.RetryAfter, r.DeniedBy = Never, i+1
				return r
			}
		}
		for i, w := range l.Limits {
			if c[i]+cost <= w.Count {
				continue
			}
			j := w.Count - cost + 1
			var t int64
			if l.Buckets == 0 {
				var in []int64
				for _, x := range n.times {
					if x > e-w.Window.Microseconds() {
						in = append(in, x)
					}
				}
				sort.Slice(in, func(a, b int) bool { return in[a] > in[b] })
				t = in[j-1] + w.Window.Microseconds()
			} else {
				bw := l.BucketWidth(i)
				var bs []int64
				for b := range n.buckets[i] {
					if b >= e/bw-l.Buckets {
						bs = append(bs, b)
					}
				}
				slices.Sort(bs)
				var acc int64
				for x := len(bs) - 1; x >= 0; x-- {
					acc += n.buckets[i][bs[x]]
					if acc >= j {
						t = (bs[x] + l.Buckets + 1) * bw
						break
					}
				}
			}
			if t > wait {
				wait, by = t, i+1
			}
		}
		if l.MinGap > 0 && hasLast && cost > 0 && last+l.MinGap.Microseconds() > wait { // a peek keeps no gap
			wait, by = last+l.MinGap.Microseconds(), DeniedByGap
		}
		r.RetryAfter, r.DeniedBy = time.Duration(wait-now)*time.Microsecond, by
	}
	return r
}

type naiveCounter struct {
	slices map[int64]int64
	latest int64
	has    bool
}

func (n *naiveCounter) decide(wc WindowCounter, now, cost int64) Result {
	if n.slices == nil {
		n.slices = map[int64]int64{}
	}
	s := wc.SliceMicros()
	cur := now / s
	if n.has {
		cur = max(cur, n.latest)
	}
	count := func(i int) int64 {
		var c int64
		for k, x := range n.slices {
			if k > cur-wc.Slices(i) {
				c += x
			}
		}
		return c
	}
	fits := true
	for i, w := range wc.Limits {
		if cost > 0 && count(i)+cost > w.Count {
			fits = false
		}
	}
	r := Result{Allowed: fits, Quota: wc.minLimit()}
	if fits && cost > 0 {
		r.Admitted = cost
		n.slices[cur] += cost
		n.latest, n.has = cur, true
	}
	r.Remaining = 1 << 62
	for i, w := range wc.Limits {
		r.Remaining = min(r.Remaining, max(w.Count-count(i), 0))
	}
	if n.has {
		if reset := (n.latest + wc.maxSlices()) * s; reset > now {
			r.ResetAfter = time.Duration(reset-now) * time.Microsecond
		}
	}
	if !fits {
		var wait int64
		for i, w := range wc.Limits {
			if cost > w.Count {
				r.RetryAfter, r.DeniedBy = Never, i+1
				return r
			}
			if count(i)+cost <= w.Count {
				continue
			}
			var acc int64
			for k := n.latest; ; k-- {
				acc += n.slices[k]
				if acc > w.Count-cost {
					if t := (k + wc.Slices(i)) * s; t > wait {
						wait, r.DeniedBy = t, i+1
					}
					break
				}
			}
		}
		r.RetryAfter = time.Duration(wait-now) * time.Microsecond
	}
	return r
}

func randomLog(r *rand.Rand) SlidingLog {
	l := SlidingLog{Mode: Mode(r.IntN(3))}
	for range 1 + r.IntN(3) {
		l.Limits = append(l.Limits, Window{Count: 1 + r.Int64N(8), Window: time.Duration(1+r.Int64N(3000)) * time.Millisecond})
	}
	if r.IntN(2) == 0 {
		l.Buckets = 1 + r.Int64N(7)
	}
	if r.IntN(3) == 0 {
		l.MinGap = time.Duration(r.Int64N(int64(l.Limits[0].Window)))
	}
	return l
}

func randomCounter(r *rand.Rand) WindowCounter {
	slice := time.Duration(1+r.Int64N(500)) * time.Millisecond
	wc := WindowCounter{Slice: slice}
	for range 1 + r.IntN(3) {
		wc.Limits = append(wc.Limits, Window{Count: 1 + r.Int64N(10), Window: slice * time.Duration(1+r.IntN(8))})
	}
	return wc
}

// step returns a random next time: mostly forward, sometimes back.
func step(r *rand.Rand, now int64) int64 {
	switch {
	case r.IntN(10) == 0:
		return now - r.Int64N(2_000_000)
	case r.IntN(20) == 0:
		return now + r.Int64N(10_000_000)
	}
	return now + r.Int64N(400_000)
}

func TestSlidingLogMatchesModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for trace := 0; trace < 400; trace++ {
		l := randomLog(r)
		var s State
		var n naiveLog
		now := int64(1800003000334587) + r.Int64N(1e9)
		for i := 0; i < 100; i++ {
			now = step(r, now)
			cost := r.Int64N(4)
			if r.IntN(15) == 0 {
				cost = 5 + r.Int64N(10)
			}
			got, want := l.decide(&s, now, cost, true), n.decide(l, now, cost)
			if got != want {
				t.Fatalf("trace %d step %d %+v now %d cost %d:\n got %+v\nwant %+v", trace, i, l, now, cost, got, want)
			}
		}
	}
}

func TestWindowCounterMatchesModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	for trace := 0; trace < 400; trace++ {
		wc := randomCounter(r)
		var s State
		var n naiveCounter
		now := int64(1800003000334587) + r.Int64N(1e9)
		for i := 0; i < 100; i++ {
			now = step(r, now)
			cost := r.Int64N(4)
			if r.IntN(15) == 0 {
				cost = 5 + r.Int64N(10)
			}
			got, want := wc.decide(&s, now, cost, true), n.decide(wc, now, cost)
			if got != want {
				t.Fatalf("trace %d step %d %+v now %d cost %d:\n got %+v\nwant %+v", trace, i, wc, now, cost, got, want)
			}
		}
	}
}

func cloneState(s State) State {
	s.Log = slices.Clone(s.Log)
	return s
}

func sameState(a, b State) bool {
	return a.Expire == b.Expire && a.A == b.A && a.B == b.B && slices.Equal(a.Log, b.Log)
}

// TestWindowedWaitIsExact: a decision that is not allowed reports a wait
// that is never 0, after which the same batch is admitted in full when
// nothing else happened, and 1µs before which it is not; a decision with
// commit false changes nothing and says what commit true would.
func TestWindowedWaitIsExact(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	checked := 0
	for trace := 0; trace < 400; trace++ {
		var l Limit
		if trace%2 == 0 {
			l = randomLog(r)
		} else {
			l = randomCounter(r)
		}
		var s State
		now := int64(1800003000334587) + r.Int64N(1e9)
		for i := 0; i < 60; i++ {
			now = step(r, now)
			cost := r.Int64N(4)
			before := cloneState(s)
			peek := decideLimit(t, l, &s, now, cost, false)
			if !sameState(before, s) {
				t.Fatalf("%+v: Decide with commit false changed the state", l)
			}
			res := decideLimit(t, l, &s, now, cost, true)
			if peek != res {
				t.Fatalf("%+v now %d cost %d: commit false said %+v, commit true %+v", l, now, cost, peek, res)
			}
			if res.Allowed != (res.RetryAfter == 0) || res.Allowed != (res.DeniedBy == 0) {
				t.Fatalf("%+v cost %d: %+v", l, cost, res)
			}
			if res.Allowed || res.RetryAfter == Never {
				continue
			}
			checked++
			at := now + res.RetryAfter.Microseconds()
			probe := cloneState(s)
			if got := decideLimit(t, l, &probe, at, cost, false); !got.Allowed {
				t.Fatalf("%+v cost %d at %d: wait %v, but at %d %+v", l, cost, now, res.RetryAfter, at, got)
			}
			if got := decideLimit(t, l, &probe, at-1, cost, false); got.Allowed {
				t.Fatalf("%+v cost %d at %d: wait %v, but 1µs earlier %+v", l, cost, now, res.RetryAfter, got)
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d denials checked", checked)
	}
}

func TestSlidingLogHammering(t *testing.T) {
	// Uniform: a caller who keeps trying every 100ms against 5 per second
	// stays locked out; binary lets it through once a second.
	for _, tc := range []struct {
		mode    Mode
		allowed int
	}{{Binary, 5 * 10}, {Uniform, 5}, {Nary, 5 * 10}} {
		l := SlidingLog{Limits: []Window{{Count: 5, Window: time.Second}}, Mode: tc.mode}
		var s State
		n := 0
		for i := int64(0); i < 100; i++ {
			if l.decide(&s, 1e15+i*100_000, 1, true).Allowed {
				n++
			}
		}
		if n != tc.allowed {
			t.Errorf("%v: %d of 100 allowed, want %d", tc.mode, n, tc.allowed)
		}
	}
}

func TestWindowedValidate(t *testing.T) {
	w := func(l int64, d time.Duration) []Window { return []Window{{Count: l, Window: d}} }
	bad := []Limit{
		SlidingLog{},
		SlidingLog{Limits: w(0, time.Second)},
		SlidingLog{Limits: w(-1, time.Second)},
		SlidingLog{Limits: w(1, 0)},
		SlidingLog{Limits: w(1, -time.Second)},
		SlidingLog{Limits: w(1, time.Second), Buckets: -1},
		SlidingLog{Limits: w(1, time.Second), Buckets: maxBuckets + 1},
		SlidingLog{Limits: w(1, time.Second), MinGap: 2 * time.Second},
		SlidingLog{Limits: w(1, time.Second), MinGap: -time.Second},
		SlidingLog{Limits: w(1, time.Second), Mode: 7},
		SlidingLog{Limits: w(MaxExactLimit+1, time.Second)},
		SlidingLog{Limits: w(MaxWindowLimit+1, time.Second), Buckets: 10},
		SlidingLog{Limits: make([]Window, maxWindows+1)},
		WindowCounter{},
		WindowCounter{Limits: w(0, time.Second)},
		WindowCounter{Limits: w(1, 0)},
		WindowCounter{Limits: w(1, 1500*time.Millisecond)},
		WindowCounter{Slice: -time.Second, Limits: w(1, time.Second)},
		WindowCounter{Slice: time.Millisecond, Limits: w(1, time.Hour)},
	}
	for _, l := range bad {
		if err := l.validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalid", l, err)
		}
	}
	good := []Limit{
		SlidingLog{Limits: []Window{{Count: 1000, Window: time.Hour}, {Count: 100, Window: time.Minute}}, MinGap: 100 * time.Millisecond},
		SlidingLog{Limits: w(MaxWindowLimit, time.Hour), Buckets: maxBuckets, Mode: Uniform},
		WindowCounter{Limits: []Window{{Count: 1000, Window: time.Second}, {Count: 5000, Window: 10 * time.Second}, {Count: 7000, Window: 15 * time.Second}}},
	}
	for _, l := range good {
		if err := l.validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

func TestWindowedZeroAllocs(t *testing.T) {
	limits := []Limit{
		SlidingLog{Limits: []Window{{Count: 100, Window: time.Second}, {Count: 1000, Window: time.Minute}}},
		SlidingLog{Limits: []Window{{Count: 100, Window: time.Second}}, Buckets: 10, Mode: Uniform},
		WindowCounter{Limits: []Window{{Count: 100, Window: time.Second}, {Count: 1000, Window: 10 * time.Second}}},
	}
	for _, l := range limits {
		var s State
		now := int64(1e15)
		for range 2000 { // reach the steady state's capacity
			now += 7919
			decideLimit(t, l, &s, now, 1, true)
		}
		if n := testing.AllocsPerRun(1000, func() { now += 7919; decideLimit(t, l, &s, now, 1, true) }); n != 0 {
			t.Errorf("%T: %v allocations per decision", l, n)
		}
	}
}
