package envoyimport

import (
	"maps"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/policy"
)

// TestDumpXDS: the same configuration as a file and as xDS resources
// prints the same lines of /rlconfig, and has the same unlimited
// descriptors, by the patterns of the nodes Convert makes of them.
func TestDumpXDS(t *testing.T) {
	yml := `domain: a
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 7}
    shadow_mode: true
    descriptors:
      - key: sub
        rate_limit: {unlimited: true}
  - key: free
  - key: open
    rate_limit: {unlimited: true}
    descriptors:
      - key: in
        rate_limit: {unit: hour, requests_per_unit: 1}
`
	file, fileUnlimited, _ := Dump([]File{{Name: "a.yaml", Data: []byte(yml)}})
	xds, xdsUnlimited := DumpXDS([]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "v", ShadowMode: true,
			RateLimit:   &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 7},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "sub", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}}}},
		{Key: "free"},
		{Key: "open", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "in", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1}}}},
	}}})
	want := "a.k_v: unit=MINUTE requests_per_unit=7, shadow_mode: true, quota_mode: false\n" +
		"a.k_v.sub: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"a.open: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"a.open.in: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\n"
	if file != want || xds != want {
		t.Errorf("file:\n%s\nxds:\n%s\nwant:\n%s", file, xds, want)
	}
	wantUnlimited := map[string]bool{"a/k/v/sub/*": true, "a/open/*": true}
	if !maps.Equal(fileUnlimited, wantUnlimited) || !maps.Equal(xdsUnlimited, wantUnlimited) {
		t.Errorf("unlimited: file %v, xds %v, want %v", fileUnlimited, xdsUnlimited, wantUnlimited)
	}
	// Each is the pattern of the node Convert makes of it, which a
	// descriptor of its entries reaches.
	out, _, err := Convert([]File{{Name: "a.yaml", Data: []byte(yml)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("a", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{{"a", "k", "v", "sub", "x"}, {"a", "open", "x"}} {
		if m := p.Match(path); m.Depth != len(path) || !wantUnlimited[m.Pattern] {
			t.Errorf("%v reaches %q at depth %d", path, m.Pattern, m.Depth)
		}
	}
}
