package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const slotsPolicy = `
schema:
  exports:
    children:
      "*": {limits: [{algorithm: concurrency, limit: 2, hold_for: 30s}]}
  rate:
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 9, window: 1h}]}
`

// TestSlotsOverHTTP: a check on a concurrency path answers a permit id
// with the RateLimit fields of the slots; renew and release take it back;
// a full key answers 429 with Retry-After (the earliest lease end); a lost,
// forged or malformed permit gets a clear answer and frees nothing.
func TestSlotsOverHTTP(t *testing.T) {
	s := newTestServer(t, slotsPolicy)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	type answer struct {
		Code   int
		Header http.Header
		Body   string
	}
	do := func(url, body string) (answer, DecisionJSON) {
		t.Helper()
		resp, err := http.Post(srv.URL+url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var d DecisionJSON
		json.Unmarshal(b, &d)
		return answer{resp.StatusCode, resp.Header, string(b)}, d
	}
	check := `{"path": ["exports", "acme"]}`
	w, a := do("/v1/check", check)
	if w.Code != 200 || a.Permit == "" || a.Remaining != 1 || w.Header.Get("RateLimit") != `"exports/*";r=1;t=30` || w.Header.Get("RateLimit-Policy") != `"exports/*";q=2;w=30` {
		t.Fatalf("acquire: %d %v %s", w.Code, w.Header, w.Body)
	}
	_, b := do("/v1/check", check)
	w, _ = do("/v1/check", check)
	if w.Code != 429 || w.Header.Get("Retry-After") != "30" || strings.Contains(w.Body, `"permit"`) {
		t.Fatalf("a full key: %d %v %s", w.Code, w.Header, w.Body)
	}
	slot := func(p string) string { return `{"path": ["exports", "acme"], "permit": "` + p + `"}` }
	if w, d := do("/v1/renew", slot(a.Permit)); w.Code != 200 || !d.Allowed {
		t.Fatalf("renew: %d %s", w.Code, w.Body)
	}
	for i, want := range []bool{true, false} { // idempotent
		w, d := do("/v1/release", slot(a.Permit))
		if w.Code != 200 || d.Released == nil || *d.Released != want || d.Remaining != 1 {
			t.Fatalf("release %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w, _ := do("/v1/renew", slot(a.Permit)); w.Code != 404 || !strings.Contains(w.Body, "holds no slot") {
		t.Fatalf("renew after release: %d %s", w.Code, w.Body)
	}
	// A forged id frees nothing: b still holds its slot, one is free.
	if w, d := do("/v1/release", slot("12345")); w.Code != 200 || *d.Released || d.Remaining != 1 {
		t.Fatalf("forged release: %d %s", w.Code, w.Body)
	}
	for _, bad := range []string{
		`{"path": ["exports", "acme"]}`,
		`{"path": ["exports", "acme"], "permit": "0"}`,
		`{"path": ["exports", "acme"], "permit": "9007199254740992"}`,
		`{"path": ["exports", "acme"], "permit": "+12"}`,
		`{"path": ["exports", "acme"], "permit": 12}`,
		`{"path": [], "permit": "12"}`,
		`{"path": ["rate", "acme"], "permit": "12"}`,
	} {
		if w, _ := do("/v1/release", bad); w.Code != 400 {
			t.Errorf("%s: %d %s", bad, w.Code, w.Body)
		}
	}
	if w, d := do("/v1/release", slot(b.Permit)); w.Code != 200 || !*d.Released || d.Remaining != 2 {
		t.Fatalf("release b: %d %s", w.Code, w.Body)
	}
	// POST /v1/acquire: a check that must take a slot.
	w, acq := do("/v1/acquire", `{"path": ["exports", "acme"], "cost": 2}`)
	if w.Code != 200 || acq.Permit == "" || acq.Remaining != 0 {
		t.Fatalf("acquire 2: %d %s", w.Code, w.Body)
	}
	if w, _ := do("/v1/acquire", check); w.Code != 429 || w.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire on a full key: %d %v %s", w.Code, w.Header, w.Body)
	}
	for _, bad := range []string{`{"path": ["rate", "acme"]}`, `{"path": ["exports", "acme"], "cost": 0}`, `{"path": []}`,
		`{"paths": [["exports", "acme"], ["exports", "b"]]}`, `{"path": ["exports", "acme"], "limit": {"limit": 5, "window": "1m"}}`} {
		if w, _ := do("/v1/acquire", bad); w.Code != 400 {
			t.Errorf("acquire %s: %d %s", bad, w.Code, w.Body)
		}
	}
	// A refused acquire charges nothing: after three, the rate path still
	// has all 9 of its window.
	for range 3 {
		do("/v1/acquire", `{"path": ["rate", "bob"]}`)
	}
	if w, d := do("/v1/check", `{"path": ["rate", "bob"]}`); w.Code != 200 || d.Remaining != 8 {
		t.Errorf("a check after three refused acquires: %d, remaining %d, want 200 and 8", w.Code, d.Remaining)
	}
	if w, d := do("/v1/release", slot(acq.Permit)); w.Code != 200 || !*d.Released || d.Remaining != 2 {
		t.Fatalf("release the acquire: %d %s", w.Code, w.Body)
	} else if strings.Count(w.Body, "\n") != 1 {
		t.Errorf("a release answered on several lines, unlike a check: %q", w.Body)
	}
	if got := testutil.ToFloat64(s.m.slots.WithLabelValues("http", "acquired")); got != 4 {
		t.Errorf("acquired %v", got)
	}
	if got := testutil.ToFloat64(s.m.slots.WithLabelValues("http", "released")); got != 4 {
		t.Errorf("released %v", got)
	}
	if got := testutil.ToFloat64(s.m.slots.WithLabelValues("http", "lost")); got != 1 {
		t.Errorf("lost %v", got)
	}
}

// TestNegativeHits: Envoy's is_negative_hits gives back the slots the same
// descriptor took when its stream began, and a rate limit's units, never
// more than were taken; in a request with both kinds the others are
// decided as usual.
func TestNegativeHits(t *testing.T) {
	s := newTestServer(t, `
schema:
  exports:
    children:
      tenant:
        children:
          "*": {limits: [{algorithm: concurrency, limit: 2, hold_for: 30s}]}
      rate:
        children:
          "*": {limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
`)
	g := &rateLimitService{s: s}
	ask := func(descs ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "exports", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	neg := func(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
		d.IsNegativeHits = true
		if n > 0 {
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		return d
	}
	stream := func() *rlcommon.RateLimitDescriptor { return desc("tenant", "acme") }
	// Streams start: two slots, then the third is over the limit.
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		if r := ask(stream()); r.OverallCode != want {
			t.Fatalf("stream %d: %v", i, r)
		}
	}
	// One ends: its slot comes back.
	if r := ask(neg(stream(), 0)); r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("stream end: %v", r)
	}
	// A start and an end in one request: the end frees one, the start takes it.
	if r := ask(stream(), neg(stream(), 0)); r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("mixed: %v", r)
	}
	// More ends than streams free what there is, and no more.
	if r := ask(neg(stream(), 5)); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("five ends: %v", r)
	}
	if r := ask(neg(stream(), 1)); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("an end with nothing held: %v", r)
	}
	// A rate limit gets back what a start with its own hits_addend took,
	// and nothing that no start took: not a denied start's, not more.
	rate := func() *rlcommon.RateLimitDescriptor {
		d := desc("rate", "acme")
		d.HitsAddend = wrapperspb.UInt64(1)
		return d
	}
	if r := ask(rate()); r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("rate: %v", r)
	}
	if r := ask(rate()); r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("rate, second: %v", r)
	}
	ask(neg(rate(), 1)) // the denied start's end: the admitted one's comes back
	if r := ask(rate()); r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("a negative hit gave nothing back to a rate limit: %v", r)
	}
	ask(neg(rate(), 1), neg(rate(), 1), neg(rate(), 5)) // two ends of one start, one of a cost no start took
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		if r := ask(rate()); r.OverallCode != want {
			t.Fatalf("after 7 back on a window of 1, check %d: %v", i, r)
		}
	}
	plain := desc("rate", "other") // a start without its own hits_addend is not remembered
	ask(plain)
	ask(neg(desc("rate", "other"), 1))
	if r := ask(desc("rate", "other")); r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a plain start given back: %v", r)
	}
}
