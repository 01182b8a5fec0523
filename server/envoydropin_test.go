package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dropIn serves envoyproxy/ratelimit's configuration files (name, text)
// from a directory, as the drop-in does, on the memory store at a fixed
// time.
func dropIn(t *testing.T, files ...string) *rateLimitService {
	t.Helper()
	return dropInConfig(t, Config{}, files...)
}

// dropInConfig is dropIn with cfg's settings.
func dropInConfig(t *testing.T, cfg Config, files ...string) *rateLimitService {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Store, cfg.EnvoyConfigDir, cfg.WatchInterval = "memory", dir, -1
	return &rateLimitService{s: newTestServerConfig(t, cfg)}
}

// TestDropInQuotaMode: a quota_mode descriptor never denies, as
// envoyproxy/ratelimit's: on a limit of 2 the 3rd request is OK, its
// status OK with nothing left and no reset (over quota); beside it, a
// plain descriptor over its limit still denies the request.
func TestDropInQuotaMode(t *testing.T) {
	g := dropIn(t, "q.yaml", `domain: q
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: n
    rate_limit: {unit: hour, requests_per_unit: 3}
`)
	ask := func(ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "q", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i, want := range []uint32{1, 0} {
		if r := ask(desc("q", "v")); r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != want || r.Statuses[0].DurationUntilReset.AsDuration() <= 0 {
			t.Fatalf("request %d within quota: %v, want OK with %d left and a reset", i+1, r, want)
		}
	}
	for i := range 2 {
		r := ask(desc("q", "v"), desc("n", "v"))
		st := r.Statuses[0]
		if r.OverallCode != rlv3.RateLimitResponse_OK || st.Code != rlv3.RateLimitResponse_OK || st.LimitRemaining != 0 ||
			st.CurrentLimit.GetRequestsPerUnit() != 2 || st.DurationUntilReset != nil {
			t.Fatalf("request %d over quota: %v, want OK, its status OK with its limit, nothing left and no reset", i+3, r)
		}
	}
	// n has had 2 of its 3: the 3rd is OK, the 4th denies the request
	// whatever q says.
	if r := ask(desc("n", "v"), desc("q", "v")); r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("n's 3rd: %v, want OK", r)
	}
	if r := ask(desc("n", "v"), desc("q", "v")); r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("n's 4th: %v, want OVER_LIMIT", r)
	}
}

// TestDropInRequestLimits: the drop-in honours a descriptor's own limit
// as envoyproxy/ratelimit does, with no request_limit: in place of the
// configured limit, on one counter with it when the unit is the same (and
// on one of its own when not); on a descriptor no rule matches; in place
// of unlimited; 0 admits nothing; in a domain that is not configured,
// nothing.
func TestDropInRequestLimits(t *testing.T) {
	g := dropIn(t, "t.yaml", `domain: t
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: ldap
    rate_limit: {unlimited: true}
`)
	ask := func(domain string, d *rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if (r.OverallCode == rlv3.RateLimitResponse_OK) != (r.Statuses[0].Code == rlv3.RateLimitResponse_OK) {
			t.Fatalf("%v: overall code and status differ", r)
		}
		return r.Statuses[0]
	}
	over := func(kv []string, n uint32, unit typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	type want struct {
		ok        bool
		limit     uint32 // 0: no current limit
		remaining uint32
	}
	for _, c := range []struct {
		what string
		d    *rlcommon.RateLimitDescriptor
		want want
	}{
		{"configured, 1 of 3", desc("tenant", "a"), want{true, 3, 2}},
		{"override 5 an hour, on the same counter: 2 of 5", over([]string{"tenant", "a"}, 5, typev3.RateLimitUnit_HOUR), want{true, 5, 3}},
		{"override 5 an hour: 3 of 5", over([]string{"tenant", "a"}, 5, typev3.RateLimitUnit_HOUR), want{true, 5, 2}},
		{"configured again: 4 of 3", desc("tenant", "a"), want{false, 3, 0}},
		{"override 2 a minute, a counter of its own: 1 of 2", over([]string{"tenant", "a"}, 2, typev3.RateLimitUnit_MINUTE), want{true, 2, 1}},
		{"no rule matches: 1 of 1", over([]string{"free", "x"}, 1, typev3.RateLimitUnit_HOUR), want{true, 1, 0}},
		{"no rule matches: 2 of 1", over([]string{"free", "x"}, 1, typev3.RateLimitUnit_HOUR), want{false, 1, 0}},
		{"unlimited, overridden: 1 of 1", over([]string{"ldap", "u"}, 1, typev3.RateLimitUnit_DAY), want{true, 1, 0}},
		{"unlimited, overridden: 2 of 1", over([]string{"ldap", "u"}, 1, typev3.RateLimitUnit_DAY), want{false, 1, 0}},
		{"0 an hour admits nothing", over([]string{"tenant", "b"}, 0, typev3.RateLimitUnit_HOUR), want{false, 0, 0}},
	} {
		st := ask("t", c.d)
		got := want{st.Code == rlv3.RateLimitResponse_OK, st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining}
		if got != c.want {
			t.Errorf("%s: %v, want %+v", c.what, st, c.want)
		}
	}
	if st := ask("other", over([]string{"tenant", "a"}, 1, typev3.RateLimitUnit_HOUR)); st.Code != rlv3.RateLimitResponse_OK || st.CurrentLimit != nil {
		t.Errorf("a domain not configured: %v, want OK with no limit, as Envoy's", st)
	}
	if n := testutil.ToFloat64(g.s.m.limitsIgnored); n != 0 {
		t.Errorf("%v per-request limits counted as ignored, want none", n)
	}
}

// TestDropInQuotaModeEverywhere: with QUOTA_MODE=true (envoy.quota_mode)
// no descriptor denies: over its limit a plain one, and one with a limit
// of its own, are OK with nothing left and no reset; a shadow_mode one
// keeps its reset, as envoyproxy/ratelimit answers.
func TestDropInQuotaModeEverywhere(t *testing.T) {
	g := dropInConfig(t, Config{Envoy: EnvoyConfig{QuotaMode: true}}, "a.yaml", `domain: a
descriptors:
  - key: p
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
	own := desc("o", "v")
	own.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	for i := range 3 {
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "a", Descriptors: []*rlcommon.RateLimitDescriptor{desc("p", "v"), desc("s", "v"), own}})
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != rlv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", i+1, r)
		}
		for j, st := range r.Statuses {
			hasReset := st.DurationUntilReset.AsDuration() > 0
			if st.Code != rlv3.RateLimitResponse_OK || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 1 || hasReset != (i == 0 || j == 1) {
				t.Errorf("request %d, descriptor %d: %v; want OK, its limit, nothing left and a reset only within the limit or in shadow_mode", i+1, j, st)
			}
		}
	}
}
