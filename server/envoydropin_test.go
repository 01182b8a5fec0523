package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// dropIn serves envoyproxy/ratelimit's configuration files (name, text)
// from a directory, as the drop-in does, on the memory store at a fixed
// time.
func dropIn(t *testing.T, files ...string) *rateLimitService {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, WatchInterval: -1})}
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
