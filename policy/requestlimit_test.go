package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// TestRequestLimit: a per-request limit (Envoy's descriptor limit) is
// honoured on a node that says request_limit, within its bound as a rate;
// above it is a bad request that counts nothing; on a node without
// request_limit it is ignored, and the path says so.
func TestRequestLimit(t *testing.T) {
	c := memoryChecker(t, `
schema:
  tenant:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 5, window: 1m}
        request_limit: {max: 1000, window: 1m}
  plain:
    children:
      "*": {limits: {algorithm: fixed_window, limit: 2, window: 1m}}
`)
	at := time.Unix(1_800_000_000, 0)
	decide := func(path []string, l *algo.FixedWindow) (Decision, *Query, error) {
		q := &Query{Time: at, Paths: []PathQuery{{Path: path, Cost: 1, Limit: l}}}
		var d Decision
		err := c.Decide(context.Background(), q, &d)
		return d, q, err
	}
	ten := &algo.FixedWindow{Count: 10, Window: time.Minute}
	for i := range 11 {
		d, _, err := decide([]string{"tenant", "acme"}, ten)
		if err != nil || d.Allowed != (i < 10) || d.Summary.Quota != 10 {
			t.Fatalf("request %d at 10 a minute: allowed %v, quota %d, %v", i+1, d.Allowed, d.Summary.Quota, err)
		}
	}
	// The node's own limit (5) is another key, untouched.
	if d, _, err := decide([]string{"tenant", "acme"}, nil); err != nil || !d.Allowed || d.Summary.Remaining != 4 {
		t.Errorf("the node's own limit after 10 by the request's: %+v %v", d.Summary, err)
	}
	for _, l := range []*algo.FixedWindow{{Count: 1001, Window: time.Minute}, {Count: 20, Window: time.Second}, {Count: 0, Window: time.Minute}} {
		if _, _, err := decide([]string{"tenant", "beta"}, l); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("%d per %v, above the bound of 1000 a minute: %v, want a bad request", l.Count, l.Window, err)
		}
	}
	if d, _, err := decide([]string{"tenant", "beta"}, &algo.FixedWindow{Count: 16, Window: time.Second}); err != nil || !d.Allowed {
		t.Errorf("16 a second (960 a minute) is within the bound: %+v %v", d.Summary, err)
	}
	d, q, err := decide([]string{"plain", "x"}, ten)
	if err != nil || !q.Paths[0].LimitIgnored || d.Summary.Quota != 2 {
		t.Errorf("a node without request_limit: ignored %v, quota %d, %v; want ignored and its own limit", q.Paths[0].LimitIgnored, d.Summary.Quota, err)
	}
	if _, err := Parse("l.yaml", []byte("schema:\n  a: {limits: [1, 1, 1], request_limit: {max: 0, window: 1m}}\n")); err == nil {
		t.Error("request_limit max 0 was taken")
	}
}

// TestOverride: an Exact path's Limit with Override is Envoy's descriptor
// limit: it shares the key of the node's fixed window of the same window
// (whatever the node's request_limit), has a key of its own for another
// window, limits a path no node matches below a matched first segment, and
// replaces a shadow node's limit; a path whose first segment matches
// nothing stays unmatched.
func TestOverride(t *testing.T) {
	c := memoryChecker(t, `
schema:
  d:
    children:
      tenant:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 3, window: 1h}}
      s:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1, window: 1h}, quota_mode: true}
`)
	at := time.Unix(1_800_000_000, 0)
	decide := func(l *algo.FixedWindow, path ...string) (Decision, PathQuery) {
		t.Helper()
		q := &Query{Time: at, Paths: []PathQuery{{Path: path, Cost: 1, Exact: true, Limit: l, Override: l != nil}}}
		var d Decision
		if err := c.Decide(context.Background(), q, &d); err != nil {
			t.Fatal(err)
		}
		return d, q.Paths[0]
	}
	hour5 := &algo.FixedWindow{Count: 5, Window: time.Hour}
	decide(nil, "d", "tenant", "a")
	if d, pq := decide(hour5, "d", "tenant", "a"); !d.Allowed || d.Summary.Remaining != 3 || pq.Match.Hits[0].Key != "d:tenant:a" {
		t.Errorf("5 an hour after 1 of the node's 3: %+v, key %q; want 3 left on the node's key", d.Summary, pq.Match.Hits[0].Key)
	}
	if d, pq := decide(&algo.FixedWindow{Count: 2, Window: time.Minute}, "d", "tenant", "a"); !d.Allowed || d.Summary.Remaining != 1 || pq.Match.Hits[0].Key == "d:tenant:a" {
		t.Errorf("2 a minute: %+v, key %q; want 1 left on a key of its own", d.Summary, pq.Match.Hits[0].Key)
	}
	if d, _ := decide(nil, "d", "tenant", "a"); !d.Allowed || d.Summary.Remaining != 0 {
		t.Errorf("the node's 3 after its 1, 1 by 5 an hour and 1 by 2 a minute: %+v, want the 3rd, none left", d.Summary)
	}
	for i := range 2 {
		if d, pq := decide(&algo.FixedWindow{Count: 1, Window: time.Hour}, "d", "free", "x"); d.Allowed != (i == 0) || pq.Match.Unmatched {
			t.Errorf("no node, 1 an hour, request %d: allowed %v, unmatched %v", i+1, d.Allowed, pq.Match.Unmatched)
		}
	}
	for i := range 2 {
		if d, pq := decide(hour5, "d", "s", "x"); !d.Allowed || pq.Match.Hits[0].QuotaMode || pq.Match.Hits[0].Shadow {
			t.Errorf("a quota_mode node overridden, request %d: %+v %+v, want its limit enforced", i+1, d.Summary, pq.Match.Hits[0])
		}
	}
	if d, pq := decide(hour5, "other", "k", "v"); !d.Allowed || !pq.Match.Unmatched || len(pq.Match.Hits) != 0 {
		t.Errorf("a first segment that matches nothing: %+v %+v, want unmatched", d.Summary, pq.Match)
	}
	if _, err := Parse("l.yaml", []byte("schema:\n  a: {unlimited: true, quota_mode: true}\n")); err == nil {
		t.Error("an unlimited quota_mode node was taken")
	}
}
