package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyCounts: the drop-in counts as envoyproxy/ratelimit counts
// (issue 56 items 1 and 3, a descriptor twice) unless envoy.counts says
// all_or_nothing, and envoy.shadow_mode (SHADOW_MODE) answers OK overall
// with each status as decided. Fails without counts: each: 12 hits on 10
// then 1 was OK with 9 left.
func TestEnvoyCounts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(`domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 2}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := func(k string, hits uint64) *rlcommon.RateLimitDescriptor {
		x := desc(k, "v")
		if hits != 1 {
			x.HitsAddend = wrapperspb.UInt64(hits)
		}
		return x
	}
	ask := func(g *rateLimitService, ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const ok, over = rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT
	g := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir})}
	ask(g, d("user", 12))
	if r := ask(g, d("user", 1)); r.OverallCode != over {
		t.Errorf("1 after 12 on 10: %v, want OVER_LIMIT: denied hits count", r)
	}
	ask(g, d("user", 0)) // a peek
	if r := ask(g, d("org", 1), d("org", 1), d("org", 1)); r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 0 || r.Statuses[2].Code != over {
		t.Errorf("org three times on 2: %v, want 1 left, 0 left, OVER_LIMIT", r)
	}

	sluice := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, Envoy: EnvoyConfig{Counts: "all_or_nothing"}})}
	ask(sluice, d("user", 12))
	if r := ask(sluice, d("user", 1)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("envoy.counts all_or_nothing: 1 after 12 on 10: %v, want OK with 9 left (Sluice's rules)", r)
	}

	shadow := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, Envoy: EnvoyConfig{ShadowMode: true}})}
	if r := ask(shadow, d("org", 3), d("user", 1)); r.OverallCode != ok || r.Statuses[0].Code != over || r.Statuses[1].Code != ok {
		t.Errorf("envoy.shadow_mode, org 3 on 2: %v, want OK overall, org OVER_LIMIT", r)
	}
}
