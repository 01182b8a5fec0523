package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// benchWriter is a ResponseWriter whose header map is reused, so that the
// benchmarks count the middleware's allocations and not the recorder's.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }

// benchPolicy: one GCRA level per user, loose enough that every request of
// the benchmark is allowed.
const benchPolicy = `
schema:
  api:
    children:
      "*":
        limits: [1000000000, 1000000, 1s]
`

func benchServe(b *testing.B, h http.Handler) {
	r, _ := http.NewRequest("GET", "http://example.com/hello", nil)
	r.RemoteAddr = "192.0.2.7:4711"
	w := &benchWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	reportCPU(b, cpu)
	if w.code != 0 && w.code != 200 {
		b.Fatalf("status %d", w.code)
	}
}

// reportCPU reports the process CPU time per op since start, as
// cpu-ns/op (0 where it cannot be read).
func reportCPU(b *testing.B, start time.Duration) {
	if end := cpuTime(); end > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

func apiKeyPath(r *http.Request, key string, p []string) []string { return append(p, "api", key) }

// BenchmarkMiddleware measures the middleware's overhead per request on
// the memory store:
//
//	bare            the handler alone
//	stub            the middleware with a checker that does nothing
//	                (copies a fixed one-level decision): the middleware alone
//	memory          the middleware with policy.Checker on the memory store
//	checker         policy.Checker alone, without the middleware
//	legacy          as stub, with the legacy headers
//	slots           the middleware with policy.Checker on the memory store
//	                and a concurrency limit: each request holds a slot
//	                while the handler runs, renewed until it returns
func BenchmarkMiddleware(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	b.Run("bare", func(b *testing.B) { benchServe(b, handler) })

	stub := stubChecker{d: policy.Decision{Allowed: true, Matched: true, Levels: []policy.Level{{
		Pattern: "api/*", Key: "api:192.0.2.7",
		Limit:  algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
		Result: algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 2 * time.Second},
	}}}}
	stub.d.Summary = policy.Summarize(stub.d.Levels)
	b.Run("stub", func(b *testing.B) {
		benchServe(b, httplimit.New(stub, httplimit.Options{Path: apiKeyPath}).Wrap(handler))
	})
	b.Run("legacy", func(b *testing.B) {
		benchServe(b, httplimit.New(stub, httplimit.Options{Path: apiKeyPath, Headers: httplimit.LegacyHeaders}).Wrap(handler))
	})

	c := newChecker(mustPolicy(b, benchPolicy), memoryStore(b), nil)
	b.Run("memory", func(b *testing.B) {
		benchServe(b, httplimit.New(c, httplimit.Options{Path: apiKeyPath}).Wrap(handler))
	})
	slots := newChecker(mustPolicy(b, `
schema:
  api:
    children:
      "*": {limits: [{algorithm: concurrency, limit: 10, hold_for: 1m}]}
`), memoryStore(b), nil)
	b.Run("slots", func(b *testing.B) {
		benchServe(b, httplimit.New(slots, httplimit.Options{Path: apiKeyPath}).Wrap(handler))
	})
	b.Run("checker", func(b *testing.B) {
		var d policy.Decision
		q := &policy.Query{Paths: []policy.PathQuery{{Path: []string{"api", "192.0.2.7"}, Cost: 1}}}
		ctx := context.Background()
		b.ReportAllocs()
		cpu := cpuTime()
		for i := 0; i < b.N; i++ {
			if err := c.Decide(ctx, q, &d); err != nil || !d.Allowed {
				b.Fatal(err, d.Allowed)
			}
		}
		reportCPU(b, cpu)
	})
}

// TestMiddlewareAllocs pins the middleware's own allocations per allowed
// request (a zero-cost checker, a reused header map): the per-request
// block (context, path, header slices) and the one header-values string.
func TestMiddlewareAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	stub := stubChecker{d: policy.Decision{Allowed: true, Matched: true, Levels: []policy.Level{{
		Pattern: "api/*", Key: "api:192.0.2.7",
		Limit:  algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
		Result: algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 2 * time.Second},
	}}}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	r, _ := http.NewRequest("GET", "http://example.com/hello", nil)
	r.RemoteAddr = "192.0.2.7:4711"
	w := &benchWriter{h: http.Header{}}
	for _, style := range []httplimit.HeaderStyle{httplimit.DraftHeaders, httplimit.LegacyHeaders, httplimit.NoHeaders} {
		h := httplimit.New(stub, httplimit.Options{Path: apiKeyPath, Headers: style}).Wrap(handler)
		h.ServeHTTP(w, r) // warm the pool and the header map
		n := testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		want := 2.0
		if style == httplimit.NoHeaders {
			want = 1
		}
		if n > want {
			t.Errorf("style %d: %v allocations per request, want at most %v", style, n, want)
		}
	}
}
