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
	pol, rl := appendRateLimitFields(nil, levels)
	wantPol := `"user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600, "we\"ird/%C3%A9";q=1;w=1`
	wantRL := `"user/*";r=15;t=2, "user/*/trade#0";r=999;t=10, "we\"ird/%C3%A9";r=1;t=0`
	if string(pol) != wantPol || string(rl) != wantRL {
		t.Errorf("fields:\n %s\n %s\nwant\n %s\n %s", pol, rl, wantPol, wantRL)
	}
	if pol, rl := appendRateLimitFields(nil, levels[2:3]); len(pol)+len(rl) != 0 {
		t.Errorf("shadow-only levels gave fields %q %q", pol, rl)
	}
}

func TestParseCheckFastAgrees(t *testing.T) {
	bodies := []string{
		`{"path": ["user", "alex", "trade"]}`,
		`{"path":["a"],"cost":0}`,
		` {"cost": 17 , "path" : [ "a" , "" ] } `,
		"{\"path\":[\"a\"],\n\"cost\":\t3}\r\n",
		`{"path": ["a"], "cost": 999999999999999999}`,
		`{"path": ["a"], "cost": 9999999999999999999}`,
		`{"path": ["a"], "cost": 01}`,
		`{"path": ["a"], "cost": -1}`,
		`{"path": ["a"], "cost": 1.0}`,
		`{"path": ["a"], "cost": 1e2}`,
		`{"path": ["a"], "cost": 1, "cost": 2}`,
		`{"path": ["a"], "path": ["b"]}`,
		`{"path": ["a\"b"]}`,
		`{"path": ["é"]}`,
		`{"path": ["a"], "meta": {}}`,
		`{"path": ["a"], "x": 1}`,
		`{"path": []}`,
		`{"path": ["a",]}`,
		`{"path": ["a"],}`,
		`{"path": ["a"]} x`,
		`{"path": ["a"]`,
		`{"Path": ["a"]}`,
		`{}`,
		`[]`,
		``,
		`{"path": ["a"], "cost": null}`,
		`{"path": null}`,
		`{"path": ["a"] "cost": 1}`,
		`{"path": ["` + strings.Repeat("x", 100) + `"]}`,
		`{"path": [` + strings.Repeat(`"a",`, MaxPathSegments-1) + `"a"]}`,
		`{"path": [` + strings.Repeat(`"a",`, MaxPathSegments) + `"a"]}`,
	}
	for i, body := range bodies[:5] {
		if _, _, _, ok := parseCheckFast([]byte(body), nil); !ok && i != 5 {
			t.Errorf("%q: not taken by the fast path", body)
		}
	}
	for _, body := range bodies {
		path, cost, hasCost, ok := parseCheckFast([]byte(body), nil)
		req, err := ParseCheckRequest([]byte(body))
		if !ok {
			continue
		}
		if err != nil {
			t.Errorf("%q: the fast path accepts what ParseCheckRequest refuses: %v", body, err)
			continue
		}
		want := int64(1)
		if req.Cost != nil {
			want = *req.Cost
		}
		if !hasCost {
			cost = 1
		}
		if strings.Join(path, "\x00") != strings.Join(req.Path, "\x00") || len(path) != len(req.Path) || cost != want || (req.Cost != nil) != hasCost || req.Meta != nil {
			t.Errorf("%q: fast %q %d, slow %q %d", body, path, cost, req.Path, want)
		}
	}
}
