package server

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/server/envoyimport"
	"github.com/sluicehq/sluice/store"
)

// fixedTime decides every request at one time, so that fixed windows do
// not roll over during a test.
type fixedTime struct {
	store.Store
	t time.Time
}

func (f fixedTime) DecideAll(ctx context.Context, reqs []store.Request, res []algo.Result) (bool, error) {
	for i := range reqs {
		reqs[i].Time = f.t
	}
	return f.Store.DecideAll(ctx, reqs, res)
}

// Adjust changes a key at the fixed time (the memory store adjusts).
func (f fixedTime) Adjust(ctx context.Context, req store.Request, op algo.Adjust) error {
	req.Time = f.t
	return f.Store.(store.Adjuster).Adjust(ctx, req, op)
}

// Now, Issue, Settle, Enqueue and Dequeue are the memory store's clock
// and tickets, at the fixed time (a give-back still at its estimate's).
func (f fixedTime) Now(context.Context) (time.Time, error) { return f.t, nil }

func (f fixedTime) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	t.Time = f.t
	return f.Store.(store.Settler).Issue(ctx, t, ttl)
}

func (f fixedTime) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	t.Time = f.t
	return f.Store.(store.Settler).Settle(ctx, t, reqs, op)
}

func (f fixedTime) Enqueue(ctx context.Context, t, q store.Request, entry string, ttl time.Duration) error {
	t.Time, q.Time = f.t, f.t
	return f.Store.(store.TicketQueue).Enqueue(ctx, t, q, entry, ttl)
}

func (f fixedTime) Dequeue(ctx context.Context, q store.Request) (string, error) {
	q.Time = f.t
	return f.Store.(store.TicketQueue).Dequeue(ctx, q)
}

// Block and Unblock are the memory store's, at the fixed time.
func (f fixedTime) Block(ctx context.Context, req store.Request, d time.Duration) error {
	req.Time = f.t
	return f.Store.(store.Adjuster).Block(ctx, req, d)
}

func (f fixedTime) Unblock(ctx context.Context, req store.Request) error {
	req.Time = f.t
	return f.Store.(store.Adjuster).Unblock(ctx, req)
}

// newTestServer serves policy on the memory store at a fixed time.
// testTimeout is the decision timeout of a test's server: far past any
// pause a busy machine's scheduler makes, so that a test's answers are the
// store's, never on_store_error's (a test of timeouts sets its own).
const testTimeout = time.Minute

func newTestServer(t testing.TB, policyYAML string) *Server {
	t.Helper()
	return newTestServerConfig(t, Config{Store: "memory", PolicyData: []byte(policyYAML), PolicyName: "test.yaml"})
}

// newTestServerConfig is newTestServer for a config of its own.
func newTestServerConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.store = fixedTime{s.store, time.Unix(1_800_003_000, 0)}
	s.checker.Store = s.store
	return s
}

func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// --- a reference of envoyproxy/ratelimit's lookup, written from its
// documented behaviour, to check that import-envoy + ShouldRateLimit
// match a descriptor as it does ---

type refLimit struct {
	rpu       uint32
	unit      string
	unlimited bool
	shadow    bool
}

type refNode struct {
	children map[string]*refNode
	wildcard []string
	limit    *refLimit
}

func refLoad(t *testing.T, data []byte) (string, *refNode) {
	var raw struct {
		Domain      string `yaml:"domain"`
		Descriptors []any  `yaml:"descriptors"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var load func(list []any) *refNode
	load = func(list []any) *refNode {
		n := &refNode{children: map[string]*refNode{}}
		for _, item := range list {
			m := item.(map[string]any)
			key := m["key"].(string)
			if v, ok := m["value"]; ok {
				key += "_" + toString(v)
			}
			c := &refNode{children: map[string]*refNode{}}
			if sub, ok := m["descriptors"].([]any); ok {
				c = load(sub)
			}
			if rl, ok := m["rate_limit"].(map[string]any); ok {
				l := &refLimit{}
				if u, ok := rl["unlimited"].(bool); ok {
					l.unlimited = u
				}
				if u, ok := rl["unit"].(string); ok {
					l.unit = strings.ToUpper(u)
				}
				if r, ok := rl["requests_per_unit"].(uint64); ok {
					l.rpu = uint32(r)
				}
				if s, ok := m["shadow_mode"].(bool); ok {
					l.shadow = s
				}
				c.limit = l
			}
			n.children[key] = c
			if strings.HasSuffix(key, "*") {
				n.wildcard = append(n.wildcard, key)
			}
		}
		return n
	}
	return raw.Domain, load(raw.Descriptors)
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

// refGetLimit is envoyproxy/ratelimit's GetLimit: key_value, then a
// wildcard prefix, then key; only the node the last entry reaches counts.
func refGetLimit(domains map[string]*refNode, domain string, d *rlcommon.RateLimitDescriptor) *refLimit {
	n := domains[domain]
	if n == nil {
		return nil
	}
	var found *refLimit
	for i, e := range d.Entries {
		next := n.children[e.Key+"_"+e.Value]
		if next == nil {
			for _, w := range n.wildcard {
				if strings.HasPrefix(e.Key+"_"+e.Value, strings.TrimSuffix(w, "*")) {
					next = n.children[w]
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next != nil && next.limit != nil && i == len(d.Entries)-1 {
			found = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		n = next
	}
	return found
}

func TestImportEnvoyRoundTrip(t *testing.T) {
	data, err := os.ReadFile("envoyimport/testdata/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, warnings, err := envoyimport.Convert([]envoyimport.File{{Name: "envoy.yaml", Data: data}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %q", warnings)
	}
	domain, root := refLoad(t, data)
	domains := map[string]*refNode{domain: root}
	s := newTestServer(t, string(out))
	svc := &rateLimitService{s: s}

	cases := [][]string{
		{"remote_address", "1.2.3.4"},
		{"remote_address", "10.0.0.1"},
		{"remote_address", "10.0.0.2"},
		{"remote_address", ""},
		{"message_type", "marketing"},
		{"message_type", "other"},
		{"authenticated", "true"},
		{"authenticated", "true", "client_id", "c1"},
		{"authenticated", "true", "client_id", "c1", "path", "/api/orders"},
		{"authenticated", "true", "client_id", "c1", "path", "/other"},
		{"authenticated", "true", "client_id", "c1", "path", "/api/orders", "extra", "x"},
		{"authenticated", "false"},
		{"authenticated", "false", "path", "/x"},
		{"authenticated", "false", "nope", "x"},
		{"authenticated", "maybe", "path", "/x"},
		{"source_cluster", "proxy"},
		{"bay", "7"},
		{"bay", "8"},
		{"unknown", "x"},
		{"path", "/x"},
	}
	for _, kv := range cases {
		d := desc(kv...)
		ref := refGetLimit(domains, domain, d)
		// Hit it until past its limit (a few times when unlimited).
		n := 3
		if ref != nil && !ref.unlimited && ref.rpu <= 30 {
			n = int(ref.rpu) + 2
		}
		for i := 0; i < n; i++ {
			resp, err := svc.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
			if err != nil {
				t.Fatalf("%v: %v", kv, err)
			}
			st := resp.Statuses[0]
			switch {
			case ref == nil:
				if st.Code != rlv3.RateLimitResponse_OK || st.CurrentLimit != nil {
					t.Errorf("%v: Envoy applies no limit; got %v", kv, st)
				}
			case ref.unlimited:
				if st.Code != rlv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
					t.Errorf("%v: Envoy says unlimited; got %v", kv, st)
				}
			default:
				cl := st.GetCurrentLimit()
				if cl.GetRequestsPerUnit() != ref.rpu || cl.GetUnit().String() != ref.unit {
					t.Errorf("%v: current limit %d/%v, Envoy's is %d/%s", kv, cl.GetRequestsPerUnit(), cl.GetUnit(), ref.rpu, ref.unit)
				}
				over := uint32(i+1) > ref.rpu
				wantCode := rlv3.RateLimitResponse_OK
				if over && !ref.shadow {
					wantCode = rlv3.RateLimitResponse_OVER_LIMIT
				}
				wantRemaining := uint32(0)
				if !over {
					wantRemaining = ref.rpu - uint32(i+1)
				}
				if st.Code != wantCode || resp.OverallCode != wantCode || st.LimitRemaining != wantRemaining {
					t.Errorf("%v hit %d: code %v (overall %v) remaining %d, want %v remaining %d",
						kv, i+1, st.Code, resp.OverallCode, st.LimitRemaining, wantCode, wantRemaining)
				}
				if st.DurationUntilReset == nil || st.DurationUntilReset.AsDuration() <= 0 {
					t.Errorf("%v: duration_until_reset %v", kv, st.DurationUntilReset)
				}
			}
		}
	}
}

const grpcPolicy = `
schema:
  edge:
    children:
      remote_address:
        children:
          "*":
            limits: {algorithm: fixed_window, limit: 5, window: 1m}
      path:
        children:
          /a:
            limits: {algorithm: fixed_window, limit: 2, window: 1h}
          /multi:
            limits:
              - {algorithm: fixed_window, limit: 10, window: 1s}
              - {algorithm: gcra, burst: 3, count: 60, period: 1m}
          /shadow:
            shadow: true
            limits: {algorithm: fixed_window, limit: 1, window: 1s}
`

func TestShouldRateLimitSemantics(t *testing.T) {
	s := newTestServer(t, grpcPolicy)
	svc := &rateLimitService{s: s}
	ctx := context.Background()
	call := func(hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Statuses) != len(ds) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
		}
		return resp
	}
	ip := desc("remote_address", "1.2.3.4")
	pathA := desc("path", "/a")

	// hits_addend 0 at the request level means 1.
	r := call(0, ip, pathA)
	if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("first call: %v", r)
	}
	// A descriptor's own hits_addend 0 peeks.
	peek := desc("path", "/a")
	peek.HitsAddend = wrapperspb.UInt64(0)
	r = call(1, ip, peek)
	if r.Statuses[0].LimitRemaining != 3 || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("peek: %v", r)
	}
	// Over the limit on /a with hits 2: all or nothing, so the address
	// descriptor consumes nothing either.
	r = call(2, ip, pathA)
	if r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlv3.RateLimitResponse_OK ||
		r.Statuses[1].Code != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("over limit: %v", r)
	}
	if !hasHeader(r, "Retry-After") || !hasHeader(r, "RateLimit") || !hasHeader(r, "RateLimit-Policy") {
		t.Errorf("headers: %v", r.ResponseHeadersToAdd)
	}
	// The same key twice adds the costs: 1 + 1 > 1 remaining on /a.
	r = call(1, pathA, desc("path", "/a"))
	if r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("duplicate descriptors: %v", r)
	}
	r = call(1, pathA)
	if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("last one on /a: %v", r)
	}
	// Partial paths and unknown descriptors are not limited; a node with
	// two limits reports the more restrictive one.
	r = call(1, desc("path", "/a", "extra", "x"), desc("nope", "x"), desc(), desc("path", "/multi"))
	if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit != nil {
		t.Fatalf("unmatched: %v", r)
	}
	if cl := r.Statuses[3].CurrentLimit; cl.GetRequestsPerUnit() != 60 || cl.GetUnit() != rlv3.RateLimitResponse_RateLimit_MINUTE || r.Statuses[3].LimitRemaining != 3 {
		t.Errorf("multi: %v", r.Statuses[3])
	}
	// Shadow: OK however far over.
	for i := 0; i < 3; i++ {
		r = call(1, desc("path", "/shadow"))
		if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].Code != rlv3.RateLimitResponse_OK {
			t.Fatalf("shadow %d: %v", i, r)
		}
	}
	// Bad requests.
	bad := []*rlv3.RateLimitRequest{
		{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{ip}},
		{Domain: "edge"},
	}
	for _, b := range bad {
		if _, err := svc.ShouldRateLimit(ctx, b); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
			t.Errorf("%v: error %v, want InvalidArgument", b, err)
		}
	}
}

func hasHeader(r *rlv3.RateLimitResponse, name string) bool {
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == name && h.Value != "" {
			return true
		}
	}
	return false
}

func TestEnvoyLimit(t *testing.T) {
	cases := []struct {
		spec algo.Spec
		rpu  uint32
		unit rlv3.RateLimitResponse_RateLimit_Unit
	}{
		{algo.Spec{Algorithm: "fixed_window", Limit: 500, Window: time.Second}, 500, rlv3.RateLimitResponse_RateLimit_SECOND},
		{algo.Spec{Algorithm: "fixed_window", Limit: 2, Window: 168 * time.Hour}, 2, rlv3.RateLimitResponse_RateLimit_WEEK},
		{algo.Spec{Algorithm: "fixed_window", Limit: 5, Window: 10 * time.Second}, 30, rlv3.RateLimitResponse_RateLimit_MINUTE},
		{algo.Spec{Algorithm: "gcra", Burst: 15, Count: 30, Period: time.Minute}, 30, rlv3.RateLimitResponse_RateLimit_MINUTE},
		{algo.Spec{Algorithm: "token_bucket", Burst: 5, Rate: 1, Per: 2 * time.Second}, 30, rlv3.RateLimitResponse_RateLimit_MINUTE},
		{algo.Spec{Algorithm: "gate", Interval: 10 * time.Second}, 6, rlv3.RateLimitResponse_RateLimit_MINUTE},
		{algo.Spec{Algorithm: "gate", Interval: 7 * time.Second}, 86400, rlv3.RateLimitResponse_RateLimit_WEEK},
		{algo.Spec{Algorithm: "gate", Interval: 13 * time.Second}, 2425846, rlv3.RateLimitResponse_RateLimit_YEAR},
	}
	// Every kind has a steady rate to give Envoy.
	for _, k := range algo.Kinds() {
		cases = append(cases, struct {
			spec algo.Spec
			rpu  uint32
			unit rlv3.RateLimitResponse_RateLimit_Unit
		}{k.Example().Spec(), 0, 0})
	}
	for _, c := range cases {
		l, err := c.spec.Build()
		if err != nil {
			t.Fatal(err)
		}
		got := envoyLimit(l, "n")
		if c.rpu == 0 {
			if got.RequestsPerUnit == 0 || got.Unit == rlv3.RateLimitResponse_RateLimit_UNKNOWN {
				t.Errorf("%v: no Envoy limit: %v", c.spec.Algorithm, got)
			}
			continue
		}
		if got.RequestsPerUnit != c.rpu || got.Unit != c.unit || got.Name != "n" {
			t.Errorf("%+v: %d/%v, want %d/%v", c.spec, got.RequestsPerUnit, got.Unit, c.rpu, c.unit)
		}
	}
}

// TestGRPCBounds: too many descriptors or entries are INVALID_ARGUMENT and
// decide nothing; a request whose caller has gone decides nothing either.
func TestGRPCBounds(t *testing.T) {
	s := newTestServer(t, "schema:\n  d:\n    children:\n      k:\n        children:\n          \"*\": {limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}\n")
	g := &rateLimitService{s: s}
	ctx := context.Background()
	many := make([]*rlcommon.RateLimitDescriptor, maxDescriptors+1)
	for i := range many {
		many[i] = desc("k", "v")
	}
	long := desc()
	for range maxEntries + 1 {
		long.Entries = append(long.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for name, req := range map[string]*rlv3.RateLimitRequest{
		"descriptors": {Domain: "d", Descriptors: many},
		"entries":     {Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{long}},
	} {
		if _, err := g.ShouldRateLimit(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	one := &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}}
	if _, err := g.ShouldRateLimit(gone, one); status.Code(err) != codes.Canceled {
		t.Errorf("caller gone: %v", err)
	}
	// Nothing was counted: the one allowed request is still there.
	if r, err := g.ShouldRateLimit(ctx, one); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Errorf("after the refused requests: %v %v", r, err)
	}
}

// TestRequestLimits: a descriptor's own limit (Envoy's
// RateLimitDescriptor.limit, which Envoy Gateway sets per tenant) and a
// check's "limit" are honoured on a node that says request_limit, within
// its bound; above it they are refused (INVALID_ARGUMENT, 400); on a node
// without request_limit they are ignored, counted and logged.
func TestRequestLimits(t *testing.T) {
	s := newTestServer(t, `
schema:
  ai:
    children:
      tenant:
        children:
          "*":
            limits: {algorithm: fixed_window, limit: 1000, window: 1m}
            request_limit: {max: 100, window: 1s}
  plain:
    children:
      k:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1, window: 1m}}
`)
	g := &rateLimitService{s: s}
	ctx := context.Background()
	ask := func(d *rlcommon.RateLimitDescriptor) (*rlv3.RateLimitResponse, error) {
		return g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	}
	tenant := func(rpu uint32, unit typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
		d := desc("tenant", "acme")
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	for i := range 4 {
		r, err := ask(tenant(3, typev3.RateLimitUnit_MINUTE))
		if err != nil || (r.OverallCode == rlv3.RateLimitResponse_OK) != (i < 3) || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
			t.Fatalf("request %d at 3 a minute: %v %v", i+1, r, err)
		}
	}
	if _, err := ask(tenant(101, typev3.RateLimitUnit_SECOND)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("101 a second, above the node's 100: %v, want InvalidArgument", err)
	}
	if _, err := ask(tenant(5, typev3.RateLimitUnit_UNKNOWN)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an unknown unit: %v, want InvalidArgument", err)
	}
	plain := desc("k", "x")
	plain.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: typev3.RateLimitUnit_SECOND}
	r, err := g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "plain", Descriptors: []*rlcommon.RateLimitDescriptor{plain}})
	if err != nil || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 || testutil.ToFloat64(s.m.limitsIgnored) != 1 {
		t.Errorf("a node without request_limit: %v %v, ignored %v; want its own limit and the ignoring counted", r, err, testutil.ToFloat64(s.m.limitsIgnored))
	}

	// The same over HTTP: {"limit": N, "window": D}.
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if got := post(`{"path": ["ai", "tenant", "beta"], "limit": {"limit": 2, "window": "1h"}}`); got != want {
			t.Errorf("HTTP request %d at 2 an hour: %d, want %d", i+1, got, want)
		}
	}
	for _, bad := range []string{
		`{"path": ["ai", "tenant", "beta"], "limit": {"limit": 1000, "window": "1s"}}`,
		`{"path": ["ai", "tenant", "beta"], "limit": {"limit": 2, "window": "1 hour"}}`,
	} {
		if got := post(bad); got != 400 {
			t.Errorf("%s: %d, want 400", bad, got)
		}
	}
}
