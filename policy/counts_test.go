package policy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// countsPolicy is a policy with counts (empty: left out), as import-envoy
// writes envoyproxy/ratelimit's descriptors: user=* 10 an hour, org=* 2.
func countsPolicy(t *testing.T, counts string) *policy.Checker {
	t.Helper()
	src := "schema:\n"
	if counts != "" {
		src = "counts: " + counts + "\n" + src
	}
	src += `  d:
    children:
      user:
        children:
          "*": {limits: [{algorithm: fixed_window, limit: 10, window: 1h}]}
      org:
        children:
          "*": {limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}
      shadow:
        children:
          "*": {shadow: true, limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
`
	p, err := policy.Parse("counts.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	return &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
}

// envoy decides descriptors as the gRPC service does: each an exact path
// d/key/value at its cost ("key=value:cost"), together.
func envoy(t *testing.T, c *policy.Checker, at time.Time, descs ...string) (*policy.Decision, []policy.PathQuery) {
	t.Helper()
	q := &policy.Query{Time: at}
	for _, d := range descs {
		kv, cost, _ := strings.Cut(d, ":")
		k, v, _ := strings.Cut(kv, "=")
		n := int64(1)
		if cost != "" {
			n = int64(len(cost)) // "x" is 1, "xxx" 3: no strconv in a table
			if cost == "0" {
				n = 0
			}
		}
		q.Paths = append(q.Paths, policy.PathQuery{Path: []string{"d", k, v}, Cost: n, Exact: true})
	}
	var d policy.Decision
	if err := c.Decide(context.Background(), q, &d); err != nil {
		t.Fatal(err)
	}
	return &d, q.Paths
}

func remaining(pq policy.PathQuery) int64 { return pq.Levels[0].Result.Remaining }

var t1 = time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)

// TestCountsEach: counts: each counts as envoyproxy/ratelimit does, where
// all_or_nothing (the default) keeps Sluice's rules. Fails without
// counts: the field is unknown, and every count below is Sluice's.
func TestCountsEach(t *testing.T) {
	twelve := "user=a:" + strings.Repeat("x", 12)
	t.Run("denied hits count", func(t *testing.T) { // issue 56 item 1 and 2
		for counts, wantLeft := range map[string]int64{"each": -1, "": 9, "all_or_nothing": 9} {
			c := countsPolicy(t, counts)
			if d, _ := envoy(t, c, t1, twelve); d.Allowed {
				t.Fatalf("%q: 12 on 10 admitted", counts)
			}
			d, pqs := envoy(t, c, t1, "user=a")
			if wantLeft < 0 && (d.Allowed || remaining(pqs[0]) != 0) {
				t.Errorf("counts: %s: 1 after 12 denied on 10: %+v, want denied: the 12 were counted", counts, pqs[0].Levels[0].Result)
			}
			if wantLeft >= 0 && (!d.Allowed || remaining(pqs[0]) != wantLeft) {
				t.Errorf("counts: %q: 1 after 12 denied on 10: %+v, want admitted, %d left", counts, pqs[0].Levels[0].Result, wantLeft)
			}
		}
	})
	t.Run("each descriptor on its own", func(t *testing.T) { // item 3
		c := countsPolicy(t, "each")
		d, _ := envoy(t, c, t1, "user=a", "org=o:xxx", "shadow=s:xx")
		if d.Allowed {
			t.Fatal("org=o, 3 on 2, admitted")
		}
		_, pqs := envoy(t, c, t1, "user=a:0", "shadow=s:0")
		if remaining(pqs[0]) != 9 || pqs[1].Levels[0].Result.Allowed {
			t.Errorf("after a request org=o denied: user=a %+v (want 9 left), shadow=s %+v (want over: 2 on 1 counted)", pqs[0].Levels[0].Result, pqs[1].Levels[0].Result)
		}
	})
	t.Run("twice", func(t *testing.T) {
		c := countsPolicy(t, "each")
		envoy(t, c, t1, "user=a:xxxxxxxx")
		d, pqs := envoy(t, c, t1, "user=a", "user=a", "user=a")
		if d.Allowed || remaining(pqs[0]) != 1 || remaining(pqs[1]) != 0 || pqs[2].Levels[0].Result.Allowed {
			t.Errorf("user=a three times on 8 of 10: %v, %+v %+v %+v, want 1 left, 0 left, denied", d.Allowed, pqs[0].Levels[0].Result, pqs[1].Levels[0].Result, pqs[2].Levels[0].Result)
		}
	})
	t.Run("a peek at the limit", func(t *testing.T) {
		c := countsPolicy(t, "each")
		envoy(t, c, t1, "org=o:xx")
		if d, pqs := envoy(t, c, t1, "org=o:0"); !d.Allowed || remaining(pqs[0]) != 0 {
			t.Errorf("a peek at 2 of 2: %v %+v, want admitted with 0 left, as Envoy's INCRBY 0", d.Allowed, pqs[0].Levels[0].Result)
		}
		envoy(t, c, t1, "org=o")
		if d, _ := envoy(t, c, t1, "org=o:0"); d.Allowed {
			t.Error("a peek at 3 of 2 admitted")
		}
	})
	t.Run("a descriptor's limit", func(t *testing.T) {
		// Envoy's per-request limit of the node's unit shares its count,
		// denied hits too.
		c := countsPolicy(t, "each")
		q := &policy.Query{Time: t1, Paths: []policy.PathQuery{{Path: []string{"d", "user", "a"}, Cost: 1, Exact: true, Override: true, Limit: &algo.FixedWindow{Count: 2, Window: time.Hour}}}}
		var d policy.Decision
		for i := range 3 {
			if err := c.Decide(context.Background(), q, &d); err != nil || d.Allowed != (i < 2) {
				t.Fatalf("call %d on a limit of 2: %v %v", i, d.Allowed, err)
			}
		}
		if _, pqs := envoy(t, c, t1, "user=a:0"); remaining(pqs[0]) != 7 {
			t.Errorf("the node's 10 after 3 on the descriptor's 2: %+v, want 7 left", pqs[0].Levels[0].Result)
		}
	})
	t.Run("stop_when_over", func(t *testing.T) {
		c := countsPolicy(t, "stop_when_over")
		if d, _ := envoy(t, c, t1, "user=a:xx", "org=o:xxx"); d.Allowed {
			t.Fatal("org=o, 3 on 2, admitted")
		}
		_, pqs := envoy(t, c, t1, "user=a:0", "org=o:0")
		if remaining(pqs[0]) != 10 || pqs[1].Levels[0].Result.Allowed {
			t.Errorf("after org=o went over: user=a %+v (want 10 left: stopped), org=o %+v (want over: counted)", pqs[0].Levels[0].Result, pqs[1].Levels[0].Result)
		}
		envoy(t, c, t1, "user=a:xx", "org=p")
		if _, pqs := envoy(t, c, t1, "user=a:0"); remaining(pqs[0]) != 8 {
			t.Errorf("after a request none denied: user=a %+v, want 8 left", pqs[0].Levels[0].Result)
		}
	})
}

// TestCountsField: counts takes three values, and its errors say where.
func TestCountsField(t *testing.T) {
	_, err := policy.Parse("f.yaml", []byte("counts: some\nschema:\n  a: {limits: [1, 1, 1]}\n"))
	if err == nil || !strings.Contains(err.Error(), `f.yaml:1:9: counts: want all_or_nothing, each or stop_when_over, got "some"`) {
		t.Errorf("counts: some: %v", err)
	}
	_, err = policy.Parse("f.yaml", []byte("counts: each\nschema:\n  a: {limits: {algorithm: concurrency, limit: 2, hold_for: 1s}}\n"))
	if err == nil || !strings.Contains(err.Error(), "counts: each records a denied charge: limit 0") {
		t.Errorf("counts: each on a concurrency limit: %v", err)
	}
}
