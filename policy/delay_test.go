package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// TestDelayStoresAgree decides one trace with a delay node on the memory
// store and on a real Redis, at the same explicit times: the same
// outcomes and the same delays, request by request; and a level above the
// delay node denies all or nothing as ever.
func TestDelayStoresAgree(t *testing.T) {
	p, err := Parse("delay.yaml", []byte(`
schema:
  ip:
    limits: {algorithm: fixed_window, limit: 60, window: 1h}   # all callers together
    children:
      "*":
        limits: {algorithm: gcra, burst: 5, count: 10, period: 1s}
        delay: {max: 1500ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	defer mem.Close()
	rs, err := redis.Open(context.Background(), redistest.Start(t).URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	stores := []*Checker{{Policy: NewCurrent(p), Store: mem}, {Policy: NewCurrent(p), Store: rs}}
	t0 := time.Unix(1_800_000_000, 0)
	var offsets []int
	for range 25 {
		offsets = append(offsets, 0)
	}
	for i := range 40 {
		offsets = append(offsets, 1550+37*i)
	}
	for i, off := range offsets {
		var got [2]string
		for s, c := range stores {
			var d Decision
			if err := c.Decide(context.Background(), &Query{Time: t0.Add(time.Duration(off) * time.Millisecond), Paths: []PathQuery{{Path: []string{"ip", "198.51.100.1"}, Cost: 1}}}, &d); err != nil {
				t.Fatal(err)
			}
			got[s] = fmt.Sprintf("allowed %v delay %v remaining %d/%d", d.Allowed, d.Delay, d.Levels[1].Result.Remaining, d.Levels[0].Result.Remaining)
		}
		if got[0] != got[1] {
			t.Fatalf("request %d at %d ms: memory %s, Redis %s", i, off, got[0], got[1])
		}
		if i == 5 && !strings.Contains(got[0], "delay 0s") || i == 6 && !strings.Contains(got[0], "delay 100ms") || i == 21 && !strings.Contains(got[0], "allowed false") {
			t.Errorf("request %d: %s", i, got[0])
		}
	}
}

// TestDelayErrors: a delay on a kind that cannot reserve, a bad or absurd
// duration, and a delay without limits are refused where they are written.
func TestDelayErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"schema:\n  a:\n    limits: {algorithm: fixed_window, limit: 1, window: 1s}\n    delay: {max: 1s}\n", "d.yaml:4:5: schema.a.delay: limit 0 is fixed_window: delay is for gcra and token_bucket, which refill steadily and can reserve ahead"},
		{"schema:\n  a:\n    limits: [1, 1, 1]\n    delay: {max: -1s}\n", "schema.a.delay.max: want a delay above 0 and at most 1m0s, got -1s"},
		{"schema:\n  a:\n    limits: [1, 1, 1]\n    delay: {max: 2h}\n", "want a delay above 0 and at most 1m0s, got 2h0m0s"},
		{"schema:\n  a:\n    limits: [1, 1, 1]\n    delay: {max: 500}\n", `schema.a.delay.max: want a duration such as "60s"`},
		{"schema:\n  a:\n    limits: [1, 1, 1]\n    delay: {maximum: 1s}\n", `unknown field "maximum"`},
		{"schema:\n  a:\n    delay: {max: 1s}\n    children: {b: {limits: [1, 1, 1]}}\n", "schema.a.delay: delay needs the node's own limits"},
	} {
		_, err := Parse("d.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}

// TestDelayUndo: a delayed request given up gives its units back, so the
// next one waits no longer than if it had never been made; a window above
// keeps its count.
func TestDelayUndo(t *testing.T) {
	c := memoryChecker(t, `
schema:
  ip:
    limits: {algorithm: fixed_window, limit: 100, window: 1h}
    children:
      "*":
        limits: {algorithm: gcra, burst: 0, count: 10, period: 1s}
        delay: {max: 1s}
`)
	t0 := time.Unix(1_800_000_000, 0)
	path := []string{"ip", "a"}
	check := func() Decision {
		var d Decision
		if err := c.Decide(context.Background(), oneQuery(t0, path, 1), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	check() // at once
	if d := check(); d.Delay != 100*time.Millisecond {
		t.Fatalf("second: delay %v, want 100ms", d.Delay)
	}
	if err := c.Decide(context.Background(), &Query{Op: GiveBack, Paths: []PathQuery{{Path: path, Cost: 1}}}, &Decision{}); err != nil {
		t.Fatal(err)
	}
	d := check()
	if d.Delay != 100*time.Millisecond {
		t.Errorf("after the undo: delay %v, want 100ms again", d.Delay)
	}
	if got := d.Levels[0].Result.Remaining; got != 98 {
		t.Errorf("the window above: %d remaining, want 98 (the undone request's count given back)", got)
	}
}

// TestDelayCostAboveBurst: a cost above a delay node's burst is never
// admitted, and decides nothing (the reserving plan must not see it).
func TestDelayCostAboveBurst(t *testing.T) {
	c := memoryChecker(t, `
schema:
  "*":
    limits: {algorithm: gcra, burst: 5, count: 10, period: 1s}
    delay: {max: 10s}
`)
	t0 := time.Unix(1_800_000_000, 0)
	var d Decision
	if err := c.Decide(context.Background(), oneQuery(t0, []string{"a"}, 7), &d); err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Summary.RetryAfter != algo.Never || d.Summary.Quota != 6 || len(d.Levels) != 0 {
		t.Fatalf("cost 7 over a burst of 6: %+v", d)
	}
	// Nothing was counted: 6 pass at once.
	for i := range 6 {
		if err := c.Decide(context.Background(), oneQuery(t0, []string{"a"}, 1), &d); err != nil || !d.Allowed || d.Delay != 0 {
			t.Fatalf("request %d: allowed %v delay %v, %v", i+1, d.Allowed, d.Delay, err)
		}
	}
}

// memoryChecker is a Checker of the policy src on a memory store of its
// own, closed when the test ends.
func memoryChecker(t *testing.T, src string) *Checker {
	t.Helper()
	p, err := Parse("delay.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	return &Checker{Policy: NewCurrent(p), Store: st}
}

// oneQuery is a Check of path at cost at time t.
func oneQuery(t time.Time, path []string, cost int64) *Query {
	return &Query{Time: t, Paths: []PathQuery{{Path: path, Cost: cost}}}
}
