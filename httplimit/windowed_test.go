package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// windowedPolicy: a sliding log of 2 per 10 s and 3 per 1 m for each
// caller under a window counter of 4 per 1 m and 10 per 1 h for all.
const windowedPolicy = `
schema:
  w:
    limits:
      - {algorithm: window_counter, limits: [{limit: 4, window: 1m}, {limit: 10, window: 1h}]}
    children:
      "*":
        limits:
          - {algorithm: sliding_log, limits: [{limit: 2, window: 10s}, {limit: 3, window: 1m}]}
`

// TestWindowedTrace pins the draft headers of sliding_log and
// window_counter levels on the memory store and a real Redis.
func TestWindowedTrace(t *testing.T) {
	const policyField = `"w";q=4;w=60, "w/*";q=2;w=10`
	steps := []step{
		// An allowed level's t is its time back to full: for several
		// windows, the longest one's.
		{0, "/", "", 200, map[string]string{"RateLimit-Policy": policyField, "RateLimit": `"w";r=3;t=3600, "w/*";r=1;t=60`}},
		{time.Second, "/", "", 200, map[string]string{"RateLimit": `"w";r=2;t=3600, "w/*";r=0;t=60`}},
		// The sliding log denies: its first action leaves the 10 s window
		// at 10 s.
		{2 * time.Second, "/", "", 429, map[string]string{"RateLimit": `"w";r=2;t=3599, "w/*";r=0;t=8`, "Retry-After": "8"}},
		{10 * time.Second, "/", "", 200, map[string]string{"RateLimit": `"w";r=1;t=3600, "w/*";r=0;t=60`}},
		// Now the 1 m window denies: its first action leaves at 60 s.
		{11 * time.Second, "/", "", 429, map[string]string{"RateLimit": `"w";r=1;t=3599, "w/*";r=0;t=49`, "Retry-After": "49"}},
	}
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			clk := &clock{}
			h := httplimit.New(newChecker(mustPolicy(t, windowedPolicy), open(t), clk), httplimit.Options{
				Timeout: testTimeout,
				Path:    func(r *http.Request, key string, p []string) []string { return append(p, "w", key) },
			}).Wrap(okHandler)
			for i, s := range steps {
				clk.Set(t0.Add(s.at))
				w := do(h, "GET", "http://x"+s.path, nil, "192.0.2.7:1")
				if w.Code != s.status {
					t.Fatalf("step %d: status %d, want %d", i, w.Code, s.status)
				}
				for k, want := range s.hdr {
					if got := w.Header().Get(k); got != want {
						t.Errorf("step %d: %s:\n got %q\nwant %q", i, k, got, want)
					}
				}
			}
		})
	}
}
