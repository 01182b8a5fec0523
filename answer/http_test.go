package answer

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

// TestLevelNames covers names outside printable ASCII, '%', quotes and
// limit indexes.
func TestLevelNames(t *testing.T) {
	for _, tc := range []struct {
		pattern, key, want string
	}{
		{"user/*", "user:alex", "user/*"},
		{"user/*/trade", "user:alex:trade#1", "user/*/trade#1"},
		{"user/*/trade", "user:al%23ex:trade", "user/*/trade"},
		{"user/*/trade", "user:alex:trade#x", "user/*/trade"},
		{"café/*", "caf%C3%A9:x", "caf%C3%A9/*"},
		{"100%", "100%25", "100%25"},
		{`a"b\c`, "k", `a"b\c`},
		{"tab\there", "k", "tab%09here"},
	} {
		lv := &policy.Level{Pattern: tc.pattern, Key: tc.key}
		if got := string(appendLevelName(nil, lv)); got != tc.want {
			t.Errorf("appendLevelName(%q, %q) = %q, want %q", tc.pattern, tc.key, got, tc.want)
		}
	}
}

func TestRateLimitFields(t *testing.T) {
	levels := []policy.Level{
		{Pattern: "user/*", Key: "user:alex", Limit: algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
			Result: algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 1500 * time.Millisecond}},
		{Pattern: "user/*/trade", Key: "user:alex:trade#0", Limit: algo.FixedWindow{Count: 1000, Window: time.Hour},
			Result: algo.Result{Allowed: true, Quota: 1000, Remaining: 999, ResetAfter: 10 * time.Second}},
		{Pattern: "x", Key: "x", Shadow: true, Limit: algo.Gate{Interval: time.Second},
			Result: algo.Result{Quota: 1}},
		{Pattern: `we"ird/é`, Key: "k", Limit: algo.Gate{Interval: time.Second},
			Result: algo.Result{Allowed: true, Quota: 1, Remaining: 1}},
	}
	b, end := appendDraftFields(nil, levels)
	pol, rl := b[:end], b[end:]
	wantPol := `"user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600, "we\"ird/%C3%A9";q=1;w=1`
	wantRL := `"user/*";r=15;t=2, "user/*/trade#0";r=999;t=10, "we\"ird/%C3%A9";r=1;t=0`
	if string(pol) != wantPol || string(rl) != wantRL {
		t.Errorf("fields:\n %s\n %s\nwant\n %s\n %s", pol, rl, wantPol, wantRL)
	}
	if b, _ := appendDraftFields(nil, levels[2:3]); len(b) != 0 {
		t.Errorf("shadow-only levels gave fields %q", b)
	}
}

// TestEveryKindHasAWindow: every algorithm gives the RateLimit-Policy
// field its window.
func TestEveryKindHasAWindow(t *testing.T) {
	for _, k := range algo.Kinds() {
		l := k.Example()
		q, _ := algo.Quota(l)
		lv := policy.Level{Pattern: "p", Key: "k", Limit: l, Result: algo.Result{Allowed: true, Quota: q, Remaining: q}}
		b, end := appendDraftFields(nil, []policy.Level{lv})
		if pol := string(b[:end]); !strings.Contains(pol, ";w=") {
			t.Errorf("%v: RateLimit-Policy %q has no window", k, pol)
		}
	}
}
