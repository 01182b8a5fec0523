package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

func TestAppendDecisionJSONMatchesEncodingJSON(t *testing.T) {
	d := &sluice.Decision{
		Allowed: false, Matched: true,
		Summary: algo.Result{Limit: 16, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 3 * time.Second},
		Levels: []sluice.Level{
			{Pattern: "user/*", Key: "user:al<e>x&\"\\\n\t\x01\u2028é\xff",
				Spec:   algo.Spec{Algorithm: "gcra", Burst: 15, Count: 30, Period: algo.Duration(time.Minute)},
				Result: algo.Result{Allowed: true, Limit: 16, Remaining: 15, ResetAfter: 2 * time.Second}},
			{Pattern: "a/b", Key: "a:b#1", Shadow: true,
				Spec:   algo.Spec{Algorithm: "token_bucket", Burst: 3, Rate: 1, Per: algo.Duration(1500 * time.Millisecond)},
				Result: algo.Result{Limit: 3, RetryAfter: time.Second}},
			{Pattern: "c", Key: "c", Spec: algo.Spec{Algorithm: "fixed_window", Limit: 10, Window: algo.Duration(time.Hour)}},
			{Pattern: "d", Key: "d", Spec: algo.Spec{Algorithm: "gate", Interval: algo.Duration(10 * time.Second)}},
		},
	}
	for _, storeErr := range []string{"", "store unavailable: boom"} {
		want := NewDecisionJSON(d)
		want.StoreError = storeErr
		wantB, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendDecisionJSON(nil, d, storeErr)
		if string(got) != string(wantB) {
			t.Errorf("AppendDecisionJSON:\n got %s\nwant %s", got, wantB)
		}
	}
	empty := AppendDecisionJSON(nil, &sluice.Decision{Allowed: true}, "")
	if !strings.Contains(string(empty), `"levels":[]`) {
		t.Errorf("no levels should be [], got %s", empty)
	}
}

func TestParseCheckRequest(t *testing.T) {
	ok := []struct {
		body string
		cost int64
		meta string
	}{
		{`{"path": ["user", "alex"]}`, 1, ""},
		{`{"path": ["user", ""], "cost": 0}`, 0, ""},
		{`{"path": ["a"], "cost": 5, "meta": {"user_id": "u-1", "n": [1, 2]}}`, 5, `{"user_id":"u-1","n":[1,2]}`},
		{`{"path": ["a"], "meta": null}`, 1, ""},
	}
	for _, c := range ok {
		req, err := ParseCheckRequest([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		cost := int64(1)
		if req.Cost != nil {
			cost = *req.Cost
		}
		if cost != c.cost || string(req.Meta) != c.meta {
			t.Errorf("%s: cost %d meta %s, want %d %s", c.body, cost, req.Meta, c.cost, c.meta)
		}
	}
	bad := []struct{ body, want string }{
		{``, "empty body"},
		{`{"path": []}`, `"path" is missing or empty`},
		{`{}`, `"path" is missing or empty`},
		{`{"path": ["a"], "cost": -1}`, `"cost" must not be negative`},
		{`{"path": ["a"], "costs": 1}`, `unknown field "costs"`},
		{`{"path": "a"}`, `"path" must be an array of strings`},
		{`{"path": [1]}`, `"path" must be an array of strings`},
		{`{"path": ["a"], "cost": 1.5}`, `"cost" must be an integer`},
		{`{"path": ["a"]`, "ends in the middle"},
		{`{"path": ["a"]} {}`, "more than one value"},
		{`[]`, "must be a JSON object"},
		{`{"path": ["a"], "meta": "alex"}`, `"meta" must be a JSON object`},
		{`{"path": ["a"], "meta": {"x": "` + strings.Repeat("y", MaxMetaBytes) + `"}}`, `"meta" is`},
		{`{"path": [` + strings.Repeat(`"a",`, MaxPathSegments) + `"a"]}`, "segments, more than"},
		{`{"path": ["a"],}`, "malformed JSON at byte"},
	}
	for _, c := range bad {
		_, err := ParseCheckRequest([]byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: error %v, want one containing %q", c.body, err, c.want)
		}
	}
}

func TestRateLimitFields(t *testing.T) {
	levels := []sluice.Level{
		{Pattern: "user/*", Key: "user:alex", Spec: algo.Spec{Algorithm: "gcra", Burst: 15, Count: 30, Period: algo.Duration(time.Minute)},
			Result: algo.Result{Allowed: true, Limit: 16, Remaining: 15, ResetAfter: 1500 * time.Millisecond}},
		{Pattern: "user/*/trade", Key: "user:alex:trade#0", Spec: algo.Spec{Algorithm: "fixed_window", Limit: 1000, Window: algo.Duration(time.Hour)},
			Result: algo.Result{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 10 * time.Second}},
		{Pattern: "x", Key: "x", Shadow: true, Spec: algo.Spec{Algorithm: "gate", Interval: algo.Duration(time.Second)},
			Result: algo.Result{Limit: 1}},
		{Pattern: `we"ird/é`, Key: "k", Spec: algo.Spec{Algorithm: "gate", Interval: algo.Duration(time.Second)},
			Result: algo.Result{Allowed: true, Limit: 1, Remaining: 1}},
	}
	pol, rl := appendRateLimitFields(nil, nil, levels)
	wantPol := `"user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600, "we\"ird/??";q=1;w=1`
	wantRL := `"user/*";r=15;t=2, "user/*/trade#0";r=999;t=10, "we\"ird/??";r=1;t=0`
	if string(pol) != wantPol || string(rl) != wantRL {
		t.Errorf("fields:\n %s\n %s\nwant\n %s\n %s", pol, rl, wantPol, wantRL)
	}
	if pol, rl := appendRateLimitFields(nil, nil, levels[2:3]); len(pol)+len(rl) != 0 {
		t.Errorf("shadow-only levels gave fields %q %q", pol, rl)
	}
}
