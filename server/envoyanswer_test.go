package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/server/envoyimport"
)

// envoyAnswerConfig is an Envoy configuration with each kind of
// descriptor whose answer envoyproxy/ratelimit spells its own way.
const envoyAnswerConfig = `domain: gw
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_named}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: bare
  - key: open
    rate_limit: {unlimited: true}
    descriptors:
      - key: in
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// envoyGRPC serves cfg (its store the memory store at a fixed time, so
// that no window ends during a test) on a gRPC listener, and returns a
// client of it and the server.
func envoyGRPC(t *testing.T, cfg Config) (rlv3.RateLimitServiceClient, *Server) {
	t.Helper()
	cfg.Store, cfg.GRPC, cfg.HTTP, cfg.Timeout = "memory", "127.0.0.1:0", "127.0.0.1:0", testTimeout
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.store = fixedTime{s.store, time.Unix(1_800_003_000, 0)}
	s.checker.Store = s.store
	return serveRLS(t, s), s
}

// envoyDir writes envoyAnswerConfig into a runtime directory.
func envoyDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gw.yaml"), []byte(envoyAnswerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// resetWithin reports whether secs is the time to the end of a window of
// unit seconds, counted from the epoch as envoyproxy/ratelimit counts it,
// at a whole second from before to after.
func resetWithin(secs, unit int64, before, after time.Time) bool {
	for at := before.Unix(); at <= after.Unix(); at++ {
		if secs == unit-at%unit {
			return true
		}
	}
	return false
}

func hitsOf(n uint64, kv ...string) *rlcommon.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestEnvoyAnswerFields: serving Envoy's configuration, ShouldRateLimit
// answers each field as envoyproxy/ratelimit does (issue 56 item 5: an
// over-limit descriptor has 0 remaining, the reset of a key with nothing
// counted is its window's end, an unnamed limit has no name, a
// descriptor without rate_limit is not unlimited, and a descriptor's
// hits_addend above 2^31-1 is counted); the same configuration imported
// into a limits.yaml (counting all or nothing, as Sluice's own policies)
// keeps Sluice's own answers.
func TestEnvoyAnswerFields(t *testing.T) {
	envoy, _ := envoyGRPC(t, Config{EnvoyConfigDir: envoyDir(t)})
	pol, _, err := envoyimport.Convert([]envoyimport.File{{Name: "gw.yaml", Data: []byte(envoyAnswerConfig)}}, "all_or_nothing")
	if err != nil {
		t.Fatal(err)
	}
	own, _ := envoyGRPC(t, Config{PolicyData: pol, PolicyName: "limits.yaml"})
	ctx := context.Background()

	type want struct {
		code      rlv3.RateLimitResponse_Code
		name      string
		limited   bool   // has a current_limit
		remaining uint32 // limit_remaining
		unit      int64  // duration_until_reset: to the end of the window of this many seconds; 0: none
	}
	for _, c := range []struct {
		what      string
		d         *rlcommon.RateLimitDescriptor
		envoy, sl want
	}{
		{"a cost above the limit", hitsOf(5, "tenant", "a"),
			want{rlv3.RateLimitResponse_OVER_LIMIT, "", true, 0, 3600},
			want{rlv3.RateLimitResponse_OVER_LIMIT, "gw/tenant/*", true, 3, 0}},
		{"a peek", hitsOf(0, "tenant", "p"),
			want{rlv3.RateLimitResponse_OK, "", true, 3, 3600},
			want{rlv3.RateLimitResponse_OK, "gw/tenant/*", true, 3, 0}},
		{"a named limit", desc("named", "n"),
			want{rlv3.RateLimitResponse_OK, "per_named", true, 1, 60},
			want{rlv3.RateLimitResponse_OK, "per_named", true, 1, 60}},
		{"over a named limit", hitsOf(2, "named", "n"),
			want{rlv3.RateLimitResponse_OVER_LIMIT, "per_named", true, 0, 60},
			want{rlv3.RateLimitResponse_OVER_LIMIT, "per_named", true, 1, 60}},
		{"an unlimited descriptor", desc("ldap", "x"),
			want{rlv3.RateLimitResponse_OK, "", false, math.MaxUint32, 0},
			want{rlv3.RateLimitResponse_OK, "", false, math.MaxUint32, 0}},
		{"a descriptor with neither rate_limit nor children", desc("bare", "y"),
			want{rlv3.RateLimitResponse_OK, "", false, 0, 0},
			want{rlv3.RateLimitResponse_OK, "", false, math.MaxUint32, 0}},
		{"a descriptor longer than the unlimited one it reaches", desc("ldap", "x", "more", "y"),
			want{rlv3.RateLimitResponse_OK, "", false, 0, 0},
			want{rlv3.RateLimitResponse_OK, "", false, 0, 0}},
		{"an unlimited descriptor with children", desc("open", "x"),
			want{rlv3.RateLimitResponse_OK, "", false, math.MaxUint32, 0},
			want{rlv3.RateLimitResponse_OK, "", false, 0, 0}},
	} {
		for _, side := range []struct {
			name   string
			client rlv3.RateLimitServiceClient
			want   want
		}{{"envoy_config_dir", envoy, c.envoy}, {"limits.yaml", own, c.sl}} {
			before := time.Now()
			r, err := side.client.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{c.d}})
			after := time.Now()
			if err != nil {
				t.Fatalf("%s, %s: %v", c.what, side.name, err)
			}
			st, w := r.Statuses[0], side.want
			reset := st.DurationUntilReset.AsDuration()
			resetOK := w.unit == 0 && reset == 0 || w.unit > 0 && reset%time.Second == 0 && resetWithin(int64(reset/time.Second), w.unit, before, after)
			if side.name == "limits.yaml" && w.unit > 0 { // Sluice's own: the store's window, at its fixed time
				resetOK = reset > 0 && reset <= time.Duration(w.unit)*time.Second
			}
			if st.Code != w.code || (st.CurrentLimit != nil) != w.limited || st.CurrentLimit.GetName() != w.name || st.LimitRemaining != w.remaining || !resetOK {
				t.Errorf("%s, %s: %v, want %+v", c.what, side.name, st, w)
			}
		}
	}

	// A descriptor's hits_addend above 2^31-1: counted by Envoy, more than
	// the limit; refused by Sluice's own.
	big := &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{hitsOf(3_000_000_000, "tenant", "b"), desc("tenant", "c")}}
	r, err := envoy.ShouldRateLimit(ctx, big)
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("hits_addend 3e9 from envoy_config_dir: %v, %v; want OVER_LIMIT", r, err)
	}
	if _, err := own.ShouldRateLimit(ctx, big); status.Code(err) != codes.InvalidArgument {
		t.Errorf("hits_addend 3e9 from limits.yaml: %v, want INVALID_ARGUMENT", err)
	}
}

// TestEnvoyResponseHeaders: serving Envoy's configuration, an answer adds
// no header (Sluice's own RateLimit fields are not Envoy's), and with
// envoy.response_headers (LIMIT_RESPONSE_HEADERS_ENABLED) the limit,
// remaining and reset of the descriptor nearest its limit, under the
// configured names, as envoyproxy/ratelimit adds them (issue 56 item 7):
// the last over-limit descriptor, else the first with the least
// remaining; over gRPC and in POST /json's answer.
func TestEnvoyResponseHeaders(t *testing.T) {
	ctx := context.Background()
	off, _ := envoyGRPC(t, Config{EnvoyConfigDir: envoyDir(t)})
	r, err := off.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}})
	if err != nil || len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("without response_headers: %v, %v; want no header", r.GetResponseHeadersToAdd(), err)
	}

	on, s := envoyGRPC(t, Config{EnvoyConfigDir: envoyDir(t), Envoy: EnvoyConfig{ResponseHeaders: true,
		LimitHeader: "X-RateLimit-Limit", RemainingHeader: "X-RateLimit-Remaining", ResetHeader: "X-RateLimit-Reset"}})
	headers := func(r *rlv3.RateLimitResponse) []string {
		var out []string
		for _, h := range r.ResponseHeadersToAdd {
			out = append(out, h.Key+": "+h.Value)
		}
		return out
	}
	// want is the three headers for limit and remaining, with the reset of
	// a window of unit seconds at a second from before to after.
	check := func(what string, got []string, limit, remaining string, unit int64, before, after time.Time) {
		t.Helper()
		if len(got) != 3 || got[0] != "X-RateLimit-Limit: "+limit || got[1] != "X-RateLimit-Remaining: "+remaining || !strings.HasPrefix(got[2], "X-RateLimit-Reset: ") {
			t.Errorf("%s: %q, want limit %s, remaining %s", what, got, limit, remaining)
			return
		}
		var secs int64
		for _, c := range strings.TrimPrefix(got[2], "X-RateLimit-Reset: ") {
			secs = secs*10 + int64(c-'0')
		}
		if !resetWithin(secs, unit, before, after) {
			t.Errorf("%s: %q, want a reset to the end of a window of %ds", what, got, unit)
		}
	}
	for _, c := range []struct {
		what             string
		ds               []*rlcommon.RateLimitDescriptor
		limit, remaining string
		unit             int64
	}{
		// tenant has 2 left, named 1: the least.
		{"the least remaining", []*rlcommon.RateLimitDescriptor{desc("tenant", "b"), desc("named", "n"), desc("ldap", "x")}, "2", "1", 60},
		// the first of two with 0 left.
		{"the first of the least", []*rlcommon.RateLimitDescriptor{hitsOf(3, "tenant", "c"), hitsOf(1, "named", "n")}, "3", "0", 3600},
		// both over: the last.
		{"the last over the limit", []*rlcommon.RateLimitDescriptor{hitsOf(9, "tenant", "d"), hitsOf(9, "named", "m"), desc("bare", "z")}, "2", "0", 60},
		// over, though another has less left before it.
		{"over the limit first", []*rlcommon.RateLimitDescriptor{hitsOf(0, "named", "n"), hitsOf(4, "tenant", "e")}, "3", "0", 3600},
	} {
		req := &rlv3.RateLimitRequest{Domain: "gw", Descriptors: c.ds}
		before := time.Now()
		r, err := on.ShouldRateLimit(ctx, req)
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		check(c.what, headers(r), c.limit, c.remaining, c.unit, before, after)
	}
	// Nothing limited: no header.
	if r, err := on.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{desc("ldap", "x"), desc("bare", "y")}}); err != nil || len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("nothing limited: %v, %v; want no header", r.GetResponseHeadersToAdd(), err)
	}

	// POST /json answers them in its body, as envoyproxy/ratelimit does.
	w := httptest.NewRecorder()
	before := time.Now()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(`{"domain": "gw", "descriptors": [{"entries": [{"key": "tenant", "value": "f"}]}]}`)))
	after := time.Now()
	var resp rlv3.RateLimitResponse
	if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusOK {
		t.Fatalf("/json: %d %s %v", w.Code, w.Body, err)
	}
	check("/json", headers(&resp), "3", "2", 3600, before, after)
	for k := range w.Header() {
		if strings.HasPrefix(strings.ToLower(k), "ratelimit") {
			t.Errorf("/json: HTTP header %s: Sluice's own RateLimit fields", k)
		}
	}
}

// TestEnvoyDynamicMetadata: serving Envoy's configuration with
// envoy.dynamic_metadata (RESPONSE_DYNAMIC_METADATA), an answer's
// dynamic_metadata is the request's as envoyproxy/ratelimit writes it
// (envoydiff compares it with that service's, but for a descriptor's own
// limit, which this checks); without it, or serving a limits.yaml, none.
func TestEnvoyDynamicMetadata(t *testing.T) {
	ctx := context.Background()
	with := Config{EnvoyConfigDir: envoyDir(t), Envoy: EnvoyConfig{DynamicMetadata: true}}
	on, _ := envoyGRPC(t, with)
	limited := desc("tenant", "a", "user", "u")
	limited.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	req := &rlv3.RateLimitRequest{Domain: "gw", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{hitsOf(0, "tenant", "a"), limited}}
	r, err := on.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(r.DynamicMetadata.AsMap())
	want := `{"descriptors":[{"entries":["tenant=a"],"hitsAddend":0},{"entries":["tenant=a","user=u"],"limit":"requests_per_unit:5unit:HOUR"}],"domain":"gw","hitsAddend":2,"quotaModeEnabled":false}`
	if strings.Join(strings.Fields(string(got)), "") != want {
		t.Errorf("dynamic_metadata %s, want %s (but for spaces)", got, want)
	}

	off, _ := envoyGRPC(t, Config{EnvoyConfigDir: envoyDir(t)})
	pol, _, err := envoyimport.Convert([]envoyimport.File{{Name: "gw.yaml", Data: []byte(envoyAnswerConfig)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	own, _ := envoyGRPC(t, Config{PolicyData: pol, PolicyName: "limits.yaml", Envoy: EnvoyConfig{DynamicMetadata: true}})
	for name, c := range map[string]rlv3.RateLimitServiceClient{"without dynamic_metadata": off, "a limits.yaml": own} {
		if r, err := c.ShouldRateLimit(ctx, req); err != nil || r.DynamicMetadata != nil {
			t.Errorf("%s: %v, %v; want no dynamic_metadata", name, r.GetDynamicMetadata(), err)
		}
	}
}

// TestEnvoyDynamicMetadataQuota: the dynamic metadata says whether a
// descriptor's limit is in quota mode (quotaModeEnabled; not one a
// descriptor's own limit overrides, as there) and which descriptors are
// over quota (quotaModeViolations, their indexes), as envoyproxy/ratelimit
// writes them.
func TestEnvoyDynamicMetadataQuota(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "q.yaml"), []byte(`domain: q
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: n
    rate_limit: {unit: hour, requests_per_unit: 9}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, WatchInterval: -1, Envoy: EnvoyConfig{DynamicMetadata: true}})}
	overridden := desc("q", "v")
	overridden.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	for _, c := range []struct {
		ds         []*rlcommon.RateLimitDescriptor
		enabled    bool
		violations string
	}{
		{[]*rlcommon.RateLimitDescriptor{desc("n", "v")}, false, ""},
		{[]*rlcommon.RateLimitDescriptor{desc("n", "v"), desc("q", "v")}, true, ""},
		{[]*rlcommon.RateLimitDescriptor{desc("n", "v"), desc("q", "v")}, true, "[1]"},
		{[]*rlcommon.RateLimitDescriptor{desc("q", "v"), desc("n", "v"), desc("q", "w")}, true, "[0]"},
		{[]*rlcommon.RateLimitDescriptor{desc("q", "w"), desc("n", "v"), desc("q", "v")}, true, "[0,2]"},
		{[]*rlcommon.RateLimitDescriptor{overridden, desc("n", "v")}, false, ""},
	} {
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "q", Descriptors: c.ds})
		if err != nil {
			t.Fatal(err)
		}
		m := r.DynamicMetadata.GetFields()
		violations := ""
		if v := m["quotaModeViolations"]; v != nil {
			b, _ := json.Marshal(v.AsInterface())
			violations = string(b)
		}
		if m["quotaModeEnabled"].GetBoolValue() != c.enabled || violations != c.violations {
			t.Errorf("%v: quotaModeEnabled %v, quotaModeViolations %q; want %v, %q", c.ds, m["quotaModeEnabled"], violations, c.enabled, c.violations)
		}
	}
	// Under QUOTA_MODE every descriptor is in quota mode, and only one in
	// quota mode of its own enables it, as envoyproxy/ratelimit's metadata
	// says (it read false for both before).
	all := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, WatchInterval: -1, Envoy: EnvoyConfig{DynamicMetadata: true, QuotaMode: true}})}
	for _, c := range []struct {
		ds      []*rlcommon.RateLimitDescriptor
		enabled bool
	}{
		{[]*rlcommon.RateLimitDescriptor{desc("n", "x")}, false},
		{[]*rlcommon.RateLimitDescriptor{desc("n", "x"), desc("q", "x")}, true},
	} {
		r, err := all.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "q", Descriptors: c.ds})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.DynamicMetadata.GetFields()["quotaModeEnabled"].GetBoolValue(); got != c.enabled {
			t.Errorf("QUOTA_MODE, %v: quotaModeEnabled %v, want %v", c.ds, got, c.enabled)
		}
	}
}
