package policy

import (
	"strings"
	"testing"
)

// TestGlobalNode: a node that says global: true gives requests with
// store.Request.Global set, beside a regional level that does not; global
// is refused where a region could not admit from units charged ahead.
func TestGlobalNode(t *testing.T) {
	p, err := Parse("f.yaml", []byte(`
schema:
  api:
    global: true
    limits: {algorithm: fixed_window, limit: 1000, window: 1m}
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 10, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := p.Match([]string{"api", "alex"})
	if len(m.Hits) != 2 {
		t.Fatalf("hits %+v", m.Hits)
	}
	if r := m.Hits[0].Request(0, 1); !r.Global || r.Key != "api" {
		t.Errorf("the global node's request %+v, want Global", r)
	}
	if r := m.Hits[1].Request(0, 1); r.Global {
		t.Errorf("the regional node's request %+v is Global", r)
	}
	for _, c := range []struct{ yaml, want string }{
		{"schema:\n  a:\n    global: true\n    limits: {algorithm: gcra, burst: 1, count: 1, period: 1s}\n", "schema.a.global: limit 0 is gcra"},
		{"schema:\n  a:\n    global: true\n    lease: true\n    limits: {algorithm: fixed_window, limit: 1, window: 1s}\n", "global beside lease: true"},
		{"schema:\n  a:\n    global: true\n    children: {b: {limits: [1, 1, 1]}}\n", "global needs the node's own limits"},
		{"schema:\n  a:\n    global: true\n    limits: {algorithm: fixed_window, limit: 1, window: 1s, block: {for: 1m}}\n", "limit 0 has a block"},
	} {
		if _, err := Parse("f.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
