package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/policy"
)

func TestAppendDecisionJSONMatchesEncodingJSON(t *testing.T) {
	d := &policy.Decision{
		Allowed: false, Matched: true,
		Summary: algo.Result{Quota: 16, Remaining: 0, RetryAfter: algo.Never, ResetAfter: 3 * time.Second},
		Levels: []policy.Level{
			{Pattern: "user/*", Key: "user:al<e>x&\"\\\n\t\x01\u2028é\xff",
				Limit:  algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
				Result: algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 2 * time.Second}},
			{Pattern: "a/b", Key: "a:b#1", Shadow: true,
				Limit:  algo.TokenBucket{Burst: 3, Count: 1, Period: 1500 * time.Millisecond},
				Result: algo.Result{Quota: 3, RetryAfter: time.Second}},
			{Pattern: "c", Key: "c", Limit: algo.FixedWindow{Count: 10, Window: time.Hour}},
			{Pattern: "d", Key: "d", Limit: algo.Gate{Interval: 10 * time.Second}},
			{Pattern: "e", Key: "e", Limit: algo.SlidingLog{Limits: []algo.Window{{Name: "n", Count: 3, Window: time.Minute}}, Buckets: 4, Mode: algo.Uniform},
				Result: algo.Result{Quota: 3, RetryAfter: time.Second, DeniedBy: 1}},
			{Pattern: "f", Key: "f"},
		},
	}
	if by := NewDecisionJSON(d).Levels[4].DeniedBy; by != "n" {
		t.Errorf("denied_by of the sliding log = %q, want its limit's name", by)
	}
	for i, storeErr := range []string{"", "store unavailable: boom"} {
		if i == 1 { // every optional field of the decision
			d.Delay, d.Listed, d.Permit = 1500*time.Millisecond, "allow 10.0.0.0/8 at a", algo.MaxPermitID
		}
		want := NewDecisionJSON(d)
		want.StoreError = storeErr
		wantB, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := appendDecisionJSON(nil, d, storeErr)
		if string(got) != string(wantB) {
			t.Errorf("appendDecisionJSON:\n got %s\nwant %s", got, wantB)
		}
	}
	empty := appendDecisionJSON(nil, &policy.Decision{Allowed: true}, "")
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
		{`{"path": ["user", "al ex"], "cost": 0}`, 0, ""},
		{`{"path": ["a"], "cost": 5, "meta": {"user_id": "u-1", "n": [1, 2]}}`, 5, `{"user_id":"u-1","n":[1,2]}`},
		{`{"path": ["a"], "meta": null}`, 1, ""},
	}
	for _, c := range ok {
		req, err := parseCheckRequest([]byte(c.body), nil)
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if cost := req.Cost; cost != c.cost || string(req.Meta) != c.meta {
			t.Errorf("%s: cost %d meta %s, want %d %s", c.body, req.Cost, req.Meta, c.cost, c.meta)
		}
	}
	bad := []struct{ body, want string }{
		{``, "empty body"},
		{`{"path": []}`, `"path" is missing or empty`},
		{`{}`, `"path" is missing or empty`},
		{`{"path": ["a"], "cost": -1}`, `"cost" must not be negative`},
		{`{"path": ["a"], "costs": 1}`, `"costs" must be an array of integers`},
		{`{"paths": [["a"], ["b"]], "costs": [1, 1.5]}`, `"costs" must be an array of integers`},
		{`{"paths": [["a"], ["b"]], "costs": [1]}`, `"costs" must hold one cost per path, in their order: 2 paths, 1 costs`},
		{`{"paths": [["a"], ["b"]], "costs": [1, 2, 3]}`, `2 paths, 3 costs`},
		{`{"paths": [["a"], ["b"]], "costs": []}`, `2 paths, 0 costs`},
		{`{"paths": [["a"], ["b"]], "costs": [1, -4000]}`, `"costs"[1] must not be negative, got -4000`},
		{`{"paths": [["a"], ["b"]], "cost": 1, "costs": [1, 2]}`, `give "cost" (the same for every path) or "costs" (one per path), not both`},
		{`{"path": ["a"], "costs": [1]}`, `"costs" goes with "paths"`},
		{`{"paths": [["a"], ["b"]], "costs": [1, 2], "Costs": [1, 2]}`, `"Costs" is given twice`},
		{`{"paths": [["a"], ["b"]], "costs": [1, 2], "settle_within": "1m", "limit": {"limit": 5, "window": "1m"}}`, `"settle_within" and "limit" do not combine`},
		{`{"path": ["login", "bob"], "path": ["free"]}`, `"path" is given twice`},
		{`{"path": ["a"], "cost": 1, "Cost": 0}`, `"Cost" is given twice`},
		{`{"path": "a"}`, `"path" must be an array of strings`},
		{`{"path": [1]}`, `"path" must be an array of strings`},
		{`{"path": ["a"], "cost": 1.5}`, `"cost" must be an integer`},
		{`{"path": ["a"]`, "ends in the middle"},
		{`{"path": ["a"]} {}`, "more than one value"},
		{`[]`, "must be a JSON object"},
		{`{"path": ["a"], "meta": "alex"}`, `"meta" must be a JSON object`},
		{`{"path": ["a"], "meta": {"x": "` + strings.Repeat("y", maxMetaBytes) + `"}}`, `"meta" is`},
		{`{"path": [` + strings.Repeat(`"a",`, maxPathSegments) + `"a"]}`, "segments, more than"},
		{`{"path": ["a"],}`, "malformed JSON at byte"},
		{`{"path": ["user", ""]}`, `"path"[1] is empty`},
		{`{"path": ["user", null]}`, `"path"[1] is empty`},
		{"{\"path\": [\"user\", \"al\xffex\"]}", "not valid UTF-8"},
		{`{"path": ["user", "\ud800"]}`, "lone surrogate"},
	}
	for _, c := range bad {
		_, err := parseCheckRequest([]byte(c.body), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: error %v, want one containing %q", c.body, err, c.want)
		}
	}
}

// TestParseCheckAgrees: what parseCheckRequest accepts, encoding/json
// (a parser Sluice did not write) accepts with the same values, and what
// encoding/json refuses, parseCheckRequest refuses.
func TestParseCheckAgrees(t *testing.T) {
	bodies := []string{
		`{"path": ["user", "alex", "trade"]}`,
		`{"path":["a"],"cost":0}`,
		` {"cost": 17 , "path" : [ "a" , "b" ] } `,
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
		`{"path": [` + strings.Repeat(`"a",`, maxPathSegments-1) + `"a"]}`,
		`{"path": [` + strings.Repeat(`"a",`, maxPathSegments) + `"a"]}`,
		`{"path": ["a", ""]}`,
		`{"paths": [["a"], ["b"]], "costs": [1, 4000]}`,
		`{"path": ["a"], "costs": [1]}`,
		`{"costs": [1], "path": ["a"]}`,
		`{"path": ["a\u00e9\n\ud83d\ude00\/"], "Cost": 2}`,
		`{"paths": [["a"], null], "costs": [1, null]}`,
		`{"path": ["a"], "limit": {"limit": 5, "window": "1m"}, "meta": {"a": [1, {"b": null}], "c": "\"x"}}`,
		`{"path": ["a"], "limit": {"limit": 5, "x": 1}}`,
		`{"path": ["a"], "meta": {"a": 01}}`,
		`{"path": ["a"], "meta": [1]}`,
		`{"path": ["a"], "settle_within": 5}`,
		`null`,
		`{"path": ["a"], "cost": -0}`,
		`{"path": ["a"], "cost": 1E+2}`,
		`{"path": ["a\x"]}`,
		`{"path": ["a\u12"]}`,
		"{\"path\": [\"a\tb\"]}",
	}
	for _, body := range bodies {
		checkAgrees(t, []byte(body))
	}
}

// checkAgrees fails t where parseCheckRequest and encoding/json disagree
// on body (parseCheckRequest refuses more: a field given twice, text that
// is not UTF-8, a bad path or meta, and the checks after decoding).
func checkAgrees(t *testing.T, body []byte) {
	t.Helper()
	req, err := parseCheckRequest(body, nil)
	var ref struct {
		Path  []string
		Paths [][]string
		Cost  *int64
		Costs []int64
		Meta  json.RawMessage
		Limit *struct {
			Limit  int64
			Window string
		}
		SettleWithin string `json:"settle_within"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	refErr := dec.Decode(&ref)
	if _, e := dec.Token(); refErr == nil && !errors.Is(e, io.EOF) {
		refErr = errors.New("more than one value")
	}
	switch {
	case refErr != nil && err == nil:
		t.Errorf("%q: parsed, encoding/json refuses it: %v", body, refErr)
	case err != nil:
	case refErr != nil:
	default:
		var meta bytes.Buffer
		if ref.Meta != nil && string(ref.Meta) != "null" {
			json.Compact(&meta, ref.Meta)
		}
		cost := int64(1)
		if ref.Cost != nil {
			cost = *ref.Cost
		}
		if ref.Paths != nil {
			ref.Path = ref.Paths[0]
		}
		if !slices.Equal(req.Path, ref.Path) || !slices.EqualFunc(req.Paths, ref.Paths, slices.Equal) || req.Cost != cost || !slices.Equal(req.Costs, ref.Costs) ||
			string(req.Meta) != meta.String() || (req.Limit != nil) != (ref.Limit != nil) || req.Limit != nil && req.Limit.Count != ref.Limit.Limit {
			t.Errorf("%q: parsed %q %q %d %v %s %v, encoding/json %q %q %d %v %s %v", body, req.Path, req.Paths, req.Cost, req.Costs, req.Meta, req.Limit, ref.Path, ref.Paths, cost, ref.Costs, meta.Bytes(), ref.Limit)
		}
	}
}

// TestEveryKindEncodes: the decision JSON of every algorithm's level is
// what encoding/json writes, spec included.
func TestEveryKindEncodes(t *testing.T) {
	for _, k := range algo.Kinds() {
		d := &policy.Decision{Allowed: true, Matched: true, Levels: []policy.Level{{Pattern: "p", Key: "k", Limit: k.Example()}}}
		want, err := json.Marshal(NewDecisionJSON(d))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendDecisionJSON(nil, d, ""); string(got) != string(want) {
			t.Errorf("%v:\n got %s\nwant %s", k, got, want)
		}
		if !strings.Contains(string(want), `"algorithm":"`+k.String()+`"`) {
			t.Errorf("%v: no spec in %s", k, want)
		}
	}
}

// TestParseCheckCosts: "costs" gives each of "paths" its own cost, in
// order; without it every path has "cost" (1 when left out).
func TestParseCheckCosts(t *testing.T) {
	req, err := parseCheckRequest([]byte(`{"paths": [["llm", "calls", "alex"], ["llm", "tokens", "alex"]], "costs": [1, 4000], "settle_within": "10m"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(req.Costs, []int64{1, 4000}) || req.hasCost || req.SettleWithin != 10*time.Minute {
		t.Fatalf("costs %v, cost %v %v, within %v", req.Costs, req.Cost, req.hasCost, req.SettleWithin)
	}
	req, err = parseCheckRequest([]byte(`{"paths": [["a"], ["b"]], "costs": [0, 0]}`), nil)
	if err != nil || !slices.Equal(req.Costs, []int64{0, 0}) {
		t.Fatalf("costs %v: %v", req.Costs, err)
	}
}

// DecisionJSON is AppendDecisionJSON's JSON as a struct, for the tests to
// read answers with, and the reference its encoding is held to (what
// encoding/json writes for NewDecisionJSON): the summary of
// policy.Summarize in the shape of CL.THROTTLE's reply, plus every level
// the request hit:
//
//	{"allowed": false, "limit": 16, "remaining": 0, "retry_after_ns": 1999000000,
//	 "reset_after_ns": 31999000000, "matched": true, "levels": [
//	   {"pattern": "user/*", "key": "user:alex", "spec": {"algorithm": "gcra", "burst": 15, "count": 30, "period": "1m0s"},
//	    "shadow": false, "allowed": false, "limit": 16, "remaining": 0,
//	    "retry_after_ns": 1999000000, "reset_after_ns": 31999000000}]}
//
// Durations are integer nanoseconds; retry_after_ns is 0 when allowed and -1
// when the cost can never be admitted (it exceeds a limit, or the request
// matched nothing under unmatched: deny). Levels is [] (never null) when the
// request hit no level. A level's configured limit is under "spec" (the
// algo.Spec JSON of replay events and limits.yaml), since "limit" is the
// result's Quota (the IETF RateLimit-Policy's q), as in the summary.
type DecisionJSON = proxytest.DecisionJSON

// LevelJSON is one level of a DecisionJSON (proxytest.LevelJSON).
type LevelJSON = proxytest.LevelJSON

// NewDecisionJSON converts a decision to its JSON form.
func NewDecisionJSON(d *policy.Decision) DecisionJSON {
	out := DecisionJSON{
		Allowed:      d.Allowed,
		Quota:        d.Summary.Quota,
		Remaining:    d.Summary.Remaining,
		RetryAfterNs: int64(d.Summary.RetryAfter),
		ResetAfterNs: int64(d.Summary.ResetAfter),
		Matched:      d.Matched,
		Levels:       make([]LevelJSON, len(d.Levels)),
		DelayNs:      int64(d.Delay),
		Listed:       d.Listed,
	}
	if d.Permit != 0 {
		out.Permit = strconv.FormatInt(d.Permit, 10)
	}
	for i, l := range d.Levels {
		out.Levels[i] = LevelJSON{
			Pattern: l.Pattern, Key: l.Key, Spec: levelSpec(&l), Shadow: l.Shadow,
			Allowed: l.Result.Allowed, Quota: l.Result.Quota, Remaining: l.Result.Remaining,
			RetryAfterNs: int64(l.Result.RetryAfter), ResetAfterNs: int64(l.Result.ResetAfter),
			DeniedBy: levelDeniedBy(&l),
		}
	}
	return out
}

// levelSpec is a level's configured limit in its serialized form, the
// zero Spec for a level with no algo.Limit.
func levelSpec(l *policy.Level) algo.Spec {
	if l.Limit == nil {
		return algo.Spec{}
	}
	return l.Limit.Spec()
}
