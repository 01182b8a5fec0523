package policy

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// TestSpecJSONMadeAtLoad: a level's AppendSpecJSON is its Limit's Spec as
// JSON, and its Window the window of its Limit's quota (algo.Quota),
// whichever way the limit came (a node's, with debt, with a delay, an
// override's, an escalate's, a request's own, Envoy's descriptor limit in
// place of the node's), and both of every limit the policy holds were
// made when it loaded (or when an override was compiled), with its plan,
// not on the request.
func TestSpecJSONMadeAtLoad(t *testing.T) {
	c := memoryChecker(t, `
schema:
  plain: {limits: [{algorithm: gcra, burst: 2, count: 3, period: 1s}, {algorithm: fixed_window, limit: 5, window: 1m}]}
  owed: {limits: {algorithm: token_bucket, rate: 5, per: 1s, burst: 5}, debt: true}
  delayed: {limits: {algorithm: gcra, burst: 1, count: 10, period: 1s}, delay: {max: 1s}}
  tenant:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 5, window: 1m}
        request_limit: {max: 1000, window: 1m}
  key:
    children:
      "*": {limits: {algorithm: fixed_window, limit: 3, window: 1h}}
  login:
    children:
      "*":
        escalate: {blocks: 1, within: 1h, block: {for: 1h}}
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1, window: 1h, block: {for: 10m}}}
`)
	ctx := context.Background()
	acme := c.Policy.Load().Match([]string{"key", "acme"}).Hits[0].Key
	if err := c.SetOverride(ctx, Override{Node: "key/*", Key: acme,
		Limits: []algo.Spec{{Algorithm: "fixed_window", Limit: 7, Window: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	seen := map[string]bool{}
	for _, pq := range []PathQuery{
		{Path: []string{"plain"}, Cost: 1},
		{Path: []string{"owed"}, Cost: 1},
		{Path: []string{"delayed"}, Cost: 1},
		{Path: []string{"tenant", "t1"}, Cost: 1},
		{Path: []string{"tenant", "t1"}, Cost: 1, Limit: &algo.FixedWindow{Count: 10, Window: time.Minute}},
		{Path: []string{"key", "charlie"}, Cost: 1, Exact: true, Override: true, Limit: &algo.FixedWindow{Count: 9, Window: time.Hour}},
		{Path: []string{"key", "acme"}, Cost: 1},
		{Path: []string{"key", "bravo"}, Cost: 1},
		{Path: []string{"login", "ip1", "u1"}, Cost: 1},
		{Path: []string{"login", "ip1", "u1"}, Cost: 1}, // over: a block, and the escalate's
	} {
		var d Decision
		if err := c.Decide(ctx, &Query{Time: at, Paths: []PathQuery{pq}}, &d); err != nil {
			t.Fatal(err)
		}
		for i := range d.Levels {
			lv := &d.Levels[i]
			s := lv.Limit.Spec()
			if got, want := lv.AppendSpecJSON(nil), s.AppendJSON(nil); string(got) != string(want) {
				t.Errorf("%v, level %s %s: spec %s, want %s", pq.Path, lv.Pattern, lv.Key, got, want)
			}
			if _, w := algo.Quota(lv.Limit); lv.Window() != w {
				t.Errorf("%v, level %s %s: window %v, want %v", pq.Path, lv.Pattern, lv.Key, lv.Window(), w)
			}
			ownLimit := pq.Limit != nil
			if made := lv.form != nil; made == ownLimit {
				t.Errorf("%v, level %s %s: made at load %v, want %v", pq.Path, lv.Pattern, lv.Key, made, !ownLimit)
			}
			seen[lv.Key] = true
		}
	}
	for _, k := range []string{"plain#0", "plain#1", "owed", "delayed", "tenant:t1", "tenant:t1#per-60000ms", "key:acme", "key:bravo", "key:charlie", "login:ip1:u1", "login:ip1#escalate"} {
		if !seen[k] {
			t.Errorf("no level of key %s", k)
		}
	}
}
