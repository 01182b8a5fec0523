package envoyimport

import (
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestDumpXDS: the same configuration as a file and as xDS resources
// prints the same lines of /rlconfig.
func TestDumpXDS(t *testing.T) {
	file := Dump([]File{{Name: "a.yaml", Data: []byte(`domain: a
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 7}
    shadow_mode: true
    descriptors:
      - key: sub
        rate_limit: {unlimited: true}
  - key: free
`)}})
	xds := DumpXDS([]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "v", ShadowMode: true,
			RateLimit:   &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 7},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "sub", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}}}},
		{Key: "free"},
	}}})
	want := "a.k_v: unit=MINUTE requests_per_unit=7, shadow_mode: true, quota_mode: false\n" +
		"a.k_v.sub: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
	if file != want || xds != want {
		t.Errorf("file:\n%s\nxds:\n%s\nwant:\n%s", file, xds, want)
	}
}
