package policy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

const globPolicy = `
schema:
  files:
    children:
      "report.pdf": {limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
      "*.pdf":      {limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}
      "/api/*/a*":  {limits: [{algorithm: fixed_window, limit: 3, window: 1h}]}
      "shared/*":   {shared_counter: true, limits: [{algorithm: fixed_window, limit: 4, window: 1h}]}
      "*":          {limits: [{algorithm: fixed_window, limit: 5, window: 1h}]}
`

// TestGlobChildren: a named child wins, then the first pattern that
// matches (each "*" any run of bytes), then "*"; a pattern's matches
// count apart unless shared_counter.
func TestGlobChildren(t *testing.T) {
	p := mustParse(t, globPolicy)
	for seg, want := range map[string]struct{ pattern, key string }{
		"report.pdf":         {"files/report.pdf", "files:report.pdf"},
		"a.pdf":              {"files/*.pdf", "files:a.pdf"},
		".pdf":               {"files/*.pdf", "files:.pdf"},
		"/api/v1/action":     {"files//api/*/a*", "files:/api/v1/action"},
		"/api/v1/x/ab":       {"files//api/*/a*", "files:/api/v1/x/ab"},
		"/api/v1/other":      {"files/*", "files:/api/v1/other"},
		"shared/x":           {"files/shared/*", "files:shared/*"},
		"shared/y":           {"files/shared/*", "files:shared/*"},
		"pdf":                {"files/*", "files:pdf"},
		"a.pdf.txt":          {"files/*", "files:a.pdf.txt"},
		"{files:shared/*}:x": {"files/*", sluice.Key("files", "{files:shared/*}:x")},
	} {
		m := p.Match([]string{"files", seg})
		if len(m.Hits) != 1 || m.Hits[0].Pattern != want.pattern || m.Hits[0].Key != want.key {
			t.Errorf("%q: %+v, want %s with key %s", seg, m.Hits, want.pattern, want.key)
		}
		if len(m.Hits) == 1 && m.Hits[0].Shared {
			t.Errorf("%q: a pattern child is a caller's level", seg)
		}
	}
}

// TestReplaces: deciding several paths together, a hit whose node another
// hit replaces is dropped, and its path is not unmatched for it.
func TestReplaces(t *testing.T) {
	p := mustParse(t, `
unmatched: deny
schema:
  k1:
    children:
      v1: {name: specific, limits: [{algorithm: fixed_window, limit: 5, window: 1h}]}
  k2:
    children:
      v2: {replaces: [specific], limits: [{algorithm: fixed_window, limit: 10, window: 1h}]}
`)
	st := memory.New()
	defer st.Close()
	c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
	q := &policy.Query{Paths: []policy.PathQuery{
		{Path: []string{"k1", "v1"}, Cost: 1, Exact: true},
		{Path: []string{"k2", "v2"}, Cost: 1, Exact: true},
	}}
	var d policy.Decision
	if err := c.Decide(context.Background(), q, &d); err != nil {
		t.Fatal(err)
	}
	if len(q.Paths[0].Levels) != 0 || q.Paths[0].Match.Unmatched || len(q.Paths[1].Levels) != 1 || !d.Allowed {
		t.Fatalf("replaced: %+v / %+v, allowed %v", q.Paths[0], q.Paths[1].Levels, d.Allowed)
	}
	// Alone, the replaced limit applies.
	if err := check(c, context.Background(), time.Time{}, []string{"k1", "v1"}, 1, &d); err != nil || len(d.Levels) != 1 || d.Levels[0].Result.Quota != 5 || d.Levels[0].Result.Remaining != 4 {
		t.Fatalf("alone: %+v, %v (want the replaced limit untouched by the pair)", d.Levels, err)
	}
}

// TestExactShadowIsTheNodes: with Exact (Envoy's matching) a shadow node
// shadows its own limits only, not its children's.
func TestExactShadowIsTheNodes(t *testing.T) {
	p := mustParse(t, `
schema:
  svc:
    shadow: true
    limits: [{algorithm: fixed_window, limit: 1, window: 1h}]
    children:
      x: {limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
`)
	st := memory.New()
	defer st.Close()
	c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
	for _, exact := range []bool{false, true} {
		q := &policy.Query{Paths: []policy.PathQuery{{Path: []string{"svc", "x"}, Cost: 1, Exact: exact}}}
		var d policy.Decision
		if err := c.Decide(context.Background(), q, &d); err != nil {
			t.Fatal(err)
		}
		lv := q.Paths[0].Levels
		if shadow := lv[len(lv)-1].Shadow; shadow == exact {
			t.Errorf("exact %v: svc/x shadow %v", exact, shadow)
		}
	}
}

// TestPlainRate: rate: N/duration for gcra and token_bucket.
func TestPlainRate(t *testing.T) {
	p := mustParse(t, `
schema:
  a: {limits: [{algorithm: gcra, burst: 15, rate: 30/1m}]}
  b: {limits: [{algorithm: token_bucket, burst: 10, rate: 5/s}]}
`)
	if got := p.Match([]string{"a"}).Hits[0].Limits[0]; got != (algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}) {
		t.Errorf("a: %#v", got)
	}
	if got := p.Match([]string{"b"}).Hits[0].Limits[0]; got != (algo.TokenBucket{Burst: 10, Count: 5, Period: time.Second}) {
		t.Errorf("b: %#v", got)
	}
	for _, bad := range []string{
		"{algorithm: gcra, burst: 1, rate: 30/xyz}",
		"{algorithm: gcra, burst: 1, rate: 0/1m}",
		"{algorithm: gcra, burst: 1, count: 2, rate: 30/1m}",
		"{algorithm: fixed_window, limit: 1, rate: 3/1m}",
	} {
		if _, err := policy.Parse("f.yaml", []byte("schema:\n  a: {limits: ["+bad+"]}\n")); err == nil || !strings.Contains(err.Error(), "schema.a.limits[0].rate") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
