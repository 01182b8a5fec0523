package server

import (
	"context"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// FuzzParseCheck: the check parser never panics, and agrees with
// encoding/json (checkAgrees).
func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{
		`{"path": ["user", "alex", "trade"]}`, `{"path": ["a"], "cost": 0}`, `{"cost": 3, "path": ["a", "b"]}`,
		`{"path": ["a"], "meta": {"user_id": "u-1"}}`, `{"path": [""]}`, `{"path": ["\ud800"]}`, `{"path": ["a"], "cost": 1e3}`,
		"{\"path\": [\"\xff\"]}", `[]`, ``, `{"path": ["a"]} {}`,
		"{\"path\": [\"a\"]}\x00", "{\"path\": [\"a\"]}\x00{}",
		`{"paths": [["llm", "calls", "alex"], ["llm", "tokens", "alex"]], "costs": [1, 4000], "settle_within": "10m"}`,
		`{"paths": [["a"], ["b"]], "costs": [1]}`, `{"paths": [["a"], ["b"]], "costs": [1, -1]}`, `{"path": ["a"], "costs": [1]}`,
		`{"paths": [["a"], ["b"]], "cost": 2, "costs": [1, 1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAgrees(t, body)
	})
}

// FuzzShouldRateLimit: any request is answered (or refused as invalid)
// without a panic, one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("edge", "remote_address", "10.0.0.1", "path", "/a", uint32(1), 2)
	f.Add("", "", "", "", "", uint32(0), 0)
	f.Add("edge", "k", "", "k", "\xff", uint32(1<<31), 64)
	s := newTestServer(f, `
schema:
  edge:
    children:
      remote_address:
        children:
          "*": {limits: [{algorithm: fixed_window, limit: 5, window: 1s}]}
          "10.*": {limits: [{algorithm: gcra, burst: 1, rate: 1/s}]}
`)
	g := &rateLimitService{s: s}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, n int) {
		n = max(0, min(n, 2*maxDescriptors))
		req := &rlv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for i := range n {
			d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}
			if i%2 == 1 {
				d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k2, Value: v2})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		resp, err := g.ShouldRateLimit(context.Background(), req)
		if err == nil && len(resp.Statuses) != n {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), n)
		}
	})
}
