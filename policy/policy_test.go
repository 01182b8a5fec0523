package policy_test

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// seed is the example of issue 4, exactly as written there.
const seed = `schema:
  user:
    children:
      "*":                 # any user id not matched by name
        limits: [15, 30, 60]   # GCRA: max_burst 15, 30 per 60 s (the CL.THROTTLE arguments)
        children:
          trade:
            limits: [5, 10, 15]
`

func mustParse(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("limits.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// level is the part of a policy.Level that the tests compare.
type level struct {
	Pattern, Key, Tag string
	Shadow            bool
	Keys              []string // the limits' keys
	Limits            []algo.Limit
}

func levels(m policy.Match) []level {
	var out []level
	for _, lv := range m.Hits {
		l := level{Pattern: lv.Pattern, Key: lv.Key, Tag: lv.Tag, Shadow: lv.Shadow}
		for j, x := range lv.Limits {
			l.Keys = append(l.Keys, lv.LimitKey(j))
			l.Limits = append(l.Limits, x)
		}
		out = append(out, l)
	}
	return out
}

func checkLevels(t *testing.T, p *policy.Policy, path []string, want []level) policy.Match {
	t.Helper()
	m := p.Match(path)
	if got := levels(m); !reflect.DeepEqual(got, want) {
		t.Errorf("Match(%q) levels:\n got %+v\nwant %+v", path, got, want)
	}
	return m
}

func TestSeedScenario(t *testing.T) {
	p := mustParse(t, seed)
	user := algo.GCRA{Burst: 15, Count: 30, Period: 60 * time.Second}
	trade := algo.GCRA{Burst: 5, Count: 10, Period: 15 * time.Second}

	m := checkLevels(t, p, []string{"user", "alex", "trade"}, []level{
		{"user/*", "user:alex", "user:alex", false, []string{"user:alex"}, []algo.Limit{user}},
		{"user/*/trade", "user:alex:trade", "user:alex", false, []string{"user:alex:trade"}, []algo.Limit{trade}},
	})
	if m.Unmatched || m.Unlimited || m.Pattern != "user/*/trade" || m.Depth != 3 {
		t.Errorf("match = %+v", m)
	}
	want := algo.Spec{Algorithm: "gcra", Burst: 15, Count: 30, Period: time.Minute}
	if got := m.Hits[0].Limits[0].Spec(); !reflect.DeepEqual(got, want) {
		t.Errorf("spec = %+v, want %+v", got, want)
	}

	m = checkLevels(t, p, []string{"user", "alex", "withdrawal"}, []level{
		{"user/*", "user:alex", "user:alex", false, []string{"user:alex"}, []algo.Limit{user}},
	})
	if m.Unmatched || m.Pattern != "user/*" || m.Depth != 2 {
		t.Errorf("withdrawal: match = %+v", m)
	}
	// Deeper segments than the tree are ignored.
	checkLevels(t, p, []string{"user", "bo", "trade", "x", "y"}, []level{
		{"user/*", "user:bo", "user:bo", false, []string{"user:bo"}, []algo.Limit{user}},
		{"user/*/trade", "user:bo:trade", "user:bo", false, []string{"user:bo:trade"}, []algo.Limit{trade}},
	})
	for _, path := range [][]string{nil, {}, {"user"}, {"order", "alex"}, {"alex", "user"}} {
		m := checkLevels(t, p, path, nil)
		if !m.Unmatched || m.Unlimited {
			t.Errorf("Match(%q) = %+v, want unmatched", path, m)
		}
	}
	if p.DenyUnmatched() {
		t.Error("DenyUnmatched by default")
	}
}

const full = `
unmatched: deny
schema:
  user:
    children:
      "*":
        limits: [15, 30, 60]
        children:
          trade:
            limits:
              - {algorithm: fixed_window, limit: 1000, window: 1h}
              - {algorithm: gcra, burst: 5, count: 10, period: 1s}
          report:
            shadow: true
            limits: [[1, 1, 1m]]
            children:
              pdf:
                limits: {algorithm: gate, interval: 10s}
      vip:
        limits: {algorithm: token_bucket, burst: 100, rate: 100, per: 1s}
        children:
          trade:
            unlimited: true
      root:
        unlimited: true
  tigerfeeding:
    limits: [{algorithm: fixed_window, limit: 100, window: 10s}]
    children:
      "*":
        limits: [{algorithm: gate, interval: 10s}]
  shop:
    children:
      cart:
        limits: [10, 10, 1]
        children:
          "*":
            children:
              add:
                limits: [1, 1, 1]
`

func TestNamedBeatsWildcard(t *testing.T) {
	p := mustParse(t, full)
	vip := algo.TokenBucket{Burst: 100, Count: 100, Period: time.Second}
	// vip's own node applies, not "*"'s; the tag is the caller's, as it
	// would be under "*".
	checkLevels(t, p, []string{"user", "vip", "report"}, []level{
		{"user/vip", "user:vip", "user:vip", false, []string{"user:vip"}, []algo.Limit{vip}},
	})
	// A named child wins outright: "*"'s children are not consulted.
	m := checkLevels(t, p, []string{"user", "vip", "trade"}, []level{
		{"user/vip", "user:vip", "user:vip", false, []string{"user:vip"}, []algo.Limit{vip}},
	})
	if !m.Unlimited || m.Unmatched || m.Pattern != "user/vip/trade" {
		t.Errorf("vip trade: %+v", m)
	}
	// A user named "*" is an ordinary user.
	checkLevels(t, p, []string{"user", "*"}, []level{
		{"user/*", "user:*", "user:*", false, []string{"user:*"}, []algo.Limit{algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}}},
	})
}

func TestMultipleLimits(t *testing.T) {
	p := mustParse(t, full)
	m := p.Match([]string{"user", "alex", "trade"})
	got := levels(m)
	if len(got) != 2 {
		t.Fatalf("levels = %+v", got)
	}
	want := level{"user/*/trade", "user:alex:trade", "user:alex", false,
		[]string{"user:alex:trade#0", "user:alex:trade#1"},
		[]algo.Limit{algo.FixedWindow{Count: 1000, Window: time.Hour}, algo.GCRA{Burst: 5, Count: 10, Period: time.Second}}}
	if !reflect.DeepEqual(got[1], want) {
		t.Errorf("trade level:\n got %+v\nwant %+v", got[1], want)
	}

	reqs := requests(m, 2, time.Unix(100, 0))
	var keys []string
	for _, r := range reqs {
		keys = append(keys, r.Key)
		if r.Cost != 2 || !r.Time.Equal(time.Unix(100, 0)) || r.Tag != "user:alex" || r.Shadow || r.Plan == nil {
			t.Errorf("request %+v", r)
		}
		if err := store.Validate(r.Key, r.Tag, r.Plan, r.Cost, r.Time); err != nil {
			t.Errorf("request %q: %v", r.Key, err)
		}
	}
	if want := []string{"user:alex", "user:alex:trade#0", "user:alex:trade#1"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("request keys = %q, want %q", keys, want)
	}
}

func TestShadow(t *testing.T) {
	p := mustParse(t, full)
	gcra := algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}
	// shadow applies to the node and to everything below it.
	m := checkLevels(t, p, []string{"user", "alex", "report", "pdf"}, []level{
		{"user/*", "user:alex", "user:alex", false, []string{"user:alex"}, []algo.Limit{gcra}},
		{"user/*/report", "user:alex:report", "user:alex", true, []string{"user:alex:report"}, []algo.Limit{algo.GCRA{Burst: 1, Count: 1, Period: time.Minute}}},
		{"user/*/report/pdf", "user:alex:report:pdf", "user:alex", true, []string{"user:alex:report:pdf"}, []algo.Limit{algo.Gate{Interval: 10 * time.Second}}},
	})
	reqs := requests(m, 1, time.Time{})
	if reqs[0].Shadow || !reqs[1].Shadow || !reqs[2].Shadow {
		t.Errorf("shadow flags: %+v", reqs)
	}
	if m.Unmatched {
		t.Error("unmatched with an enforced level")
	}

	// Levels that are all shadow do not make a match: rolling out a
	// shadow limit does not change which requests are unmatched.
	p = mustParse(t, "unmatched: deny\nschema:\n  new:\n    shadow: true\n    limits: [1, 1, 1]\n")
	m = p.Match([]string{"new"})
	if len(m.Hits) != 1 || !m.Hits[0].Shadow || !m.Unmatched || !p.DenyUnmatched() {
		t.Errorf("shadow-only match = %+v", m)
	}
}

func TestUnlimited(t *testing.T) {
	p := mustParse(t, full)
	m := checkLevels(t, p, []string{"user", "root", "trade"}, nil)
	if !m.Unlimited || m.Unmatched || m.Pattern != "user/root" || m.Depth != 2 {
		t.Errorf("root: %+v", m)
	}
	if reqs := requests(m, 1, time.Time{}); len(reqs) != 0 {
		t.Errorf("requests = %+v", reqs)
	}
	// The levels above an unlimited node still apply.
	m = p.Match([]string{"user", "vip", "trade"})
	if len(m.Hits) != 1 || m.Hits[0].Pattern != "user/vip" || !m.Unlimited {
		t.Errorf("vip trade: %+v", m)
	}
}

func TestTigerfeeding(t *testing.T) {
	p := mustParse(t, full)
	shared := algo.FixedWindow{Count: 100, Window: 10 * time.Second}
	gate := algo.Gate{Interval: 10 * time.Second}
	for _, caller := range []string{"alex", "bo"} {
		checkLevels(t, p, []string{"tigerfeeding", caller}, []level{
			{"tigerfeeding", "tigerfeeding", "tigerfeeding", false, []string{"tigerfeeding"}, []algo.Limit{shared}},
			{"tigerfeeding/*", "tigerfeeding:" + caller, "tigerfeeding:" + caller, false, []string{"tigerfeeding:" + caller}, []algo.Limit{gate}},
		})
	}
	// The shared level alone also applies.
	checkLevels(t, p, []string{"tigerfeeding"}, []level{
		{"tigerfeeding", "tigerfeeding", "tigerfeeding", false, []string{"tigerfeeding"}, []algo.Limit{shared}},
	})
	// A shared level above the wildcard, and the caller part's tag from
	// the wildcard down even when the wildcard node has no limits.
	checkLevels(t, p, []string{"shop", "cart", "alex", "add"}, []level{
		{"shop/cart", "shop:cart", "shop:cart", false, []string{"shop:cart"}, []algo.Limit{algo.GCRA{Burst: 10, Count: 10, Period: time.Second}}},
		{"shop/cart/*/add", "shop:cart:alex:add", "shop:cart:alex", false, []string{"shop:cart:alex:add"}, []algo.Limit{algo.GCRA{Burst: 1, Count: 1, Period: time.Second}}},
	})
}

func TestEscaping(t *testing.T) {
	p := mustParse(t, full)
	alex := p.Match([]string{"user", "alex", "trade"})
	var honest []string
	for _, r := range requests(alex, 1, time.Time{}) {
		honest = append(honest, r.Key, r.Tag)
	}
	for _, name := range []string{"alex:trade", "alex:trade#0", "{alex}", "a#0", "alex#0", "alex%3Atrade", "alex}", "{user:alex}"} {
		for _, tail := range [][]string{nil, {"trade"}} {
			path := append([]string{"user", name}, tail...)
			m := p.Match(path)
			if len(m.Hits) == 0 {
				t.Fatalf("Match(%q) = %+v", path, m)
			}
			for _, r := range requests(m, 1, time.Time{}) {
				for _, s := range honest {
					if r.Key == s || r.Tag == s {
						t.Errorf("Match(%q) reaches %q", path, s)
					}
				}
				if err := store.Validate(r.Key, r.Tag, r.Plan, r.Cost, r.Time); err != nil {
					t.Errorf("Match(%q): %v", path, err)
				}
			}
			for _, lv := range m.Hits {
				if strings.ContainsAny(lv.Key+lv.Tag, "{}#") || strings.Count(lv.Key, ":") != strings.Count(lv.Pattern, "/") {
					t.Errorf("Match(%q): key %q tag %q not escaped", path, lv.Key, lv.Tag)
				}
			}
			if m.Hits[0].Key != sluice.Key("user", name) {
				t.Errorf("Match(%q) key = %q, want %q", path, m.Hits[0].Key, sluice.Key("user", name))
			}
		}
	}
	// A user named "a" with two limits and a user named "a#0" cannot meet.
	m2 := mustParse(t, "schema:\n  u:\n    children:\n      \"*\": {limits: [[1, 1, 1], [2, 2, 2]]}\n")
	a := requests(m2.Match([]string{"u", "a"}), 1, time.Time{})
	b := requests(m2.Match([]string{"u", "a#0"}), 1, time.Time{})
	for _, x := range a {
		for _, y := range b {
			if x.Key == y.Key || x.Tag == y.Tag {
				t.Errorf("u/a and u/a#0 share %q/%q", x.Key, x.Tag)
			}
		}
	}
}

func TestNilPolicy(t *testing.T) {
	var p *policy.Policy
	if m := p.Match([]string{"a"}); !m.Unmatched || len(m.Hits) != 0 {
		t.Errorf("nil Match = %+v", m)
	}
	if p.DenyUnmatched() || p.Name() != "" || p.Nodes() != nil {
		t.Error("nil policy")
	}
}

func TestNodes(t *testing.T) {
	p := mustParse(t, full)
	var got []string
	for _, n := range p.Nodes() {
		s := n.Pattern
		if n.Shadow {
			s += " shadow"
		}
		if n.Unlimited {
			s += " unlimited"
		}
		for _, sp := range n.Specs {
			s += " " + sp.Algorithm
		}
		got = append(got, s)
	}
	want := []string{
		"user",
		"user/* gcra",
		"user/*/trade fixed_window gcra",
		"user/*/report shadow gcra",
		"user/*/report/pdf shadow gate",
		"user/vip token_bucket",
		"user/vip/trade unlimited",
		"user/root unlimited",
		"tigerfeeding fixed_window",
		"tigerfeeding/* gate",
		"shop",
		"shop/cart gcra",
		"shop/cart/*",
		"shop/cart/*/add gcra",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Nodes:\n got %q\nwant %q", got, want)
	}
	if p.Name() != "limits.yaml" || !p.DenyUnmatched() {
		t.Errorf("Name %q DenyUnmatched %v", p.Name(), p.DenyUnmatched())
	}
}

func TestYAMLFeatures(t *testing.T) {
	// Anchors, aliases and merge keys; a single shorthand; integer keys;
	// durations as the shorthand's period.
	p := mustParse(t, `
definitions:
  gate: &gate {algorithm: gate, interval: 10s}
  base: &base
    limits: [1, 2, 3s]
schema:
  a: &a
    limits: *gate
  b: *a
  c:
    <<: *base
    shadow: true
  d:
    <<: [*a, *base]
  7:
    limits: [[1, 2, 1m30s]]
`)
	gate := algo.Gate{Interval: 10 * time.Second}
	g123 := algo.GCRA{Burst: 1, Count: 2, Period: 3 * time.Second}
	checkLevels(t, p, []string{"a"}, []level{{"a", "a", "a", false, []string{"a"}, []algo.Limit{gate}}})
	checkLevels(t, p, []string{"b"}, []level{{"b", "b", "b", false, []string{"b"}, []algo.Limit{gate}}})
	checkLevels(t, p, []string{"c"}, []level{{"c", "c", "c", true, []string{"c"}, []algo.Limit{g123}}})
	checkLevels(t, p, []string{"d"}, []level{{"d", "d", "d", false, []string{"d"}, []algo.Limit{gate}}})
	checkLevels(t, p, []string{"7"}, []level{{"7", "7", "7", false, []string{"7"}, []algo.Limit{algo.GCRA{Burst: 1, Count: 2, Period: 90 * time.Second}}}})
}

func TestLoad(t *testing.T) {
	p, err := policy.Load("testdata/limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "testdata/limits.yaml" || len(p.Match([]string{"user", "alex", "trade"}).Hits) != 2 {
		t.Errorf("Load: %q %+v", p.Name(), p.Match([]string{"user", "alex", "trade"}))
	}
	_, err = policy.Load("testdata/missing.yaml")
	var list yamlfile.ErrorList
	if err == nil || errors.As(err, &list) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
}

// TestSharedHits: a node above every "*" is shared by all callers; from
// the segment matched where a "*" exists down, nodes are the caller's.
func TestSharedHits(t *testing.T) {
	p := mustParse(t, full)
	m := p.Match([]string{"tigerfeeding", "alex"})
	if len(m.Hits) != 2 || !m.Hits[0].Shared || m.Hits[1].Shared {
		t.Fatalf("tigerfeeding/alex hits: %+v", m.Hits)
	}
	for _, h := range p.Match([]string{"user", "alex", "trade"}).Hits {
		if h.Shared {
			t.Errorf("%s is shared, want alex's own", h.Pattern)
		}
	}
}
