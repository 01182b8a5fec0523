package server

import (
	"bytes"
	"context"
	"fmt"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

const benchPolicy = `
schema:
  user:
    children:
      "*":
        limits: {algorithm: gcra, burst: 999, count: 1000000, period: 1s}
        children:
          trade:
            limits: {algorithm: fixed_window, limit: 1000000, window: 1s}
`

// BenchmarkHandleCheck is POST /v1/check on the memory store, without the
// network: the service's own cost per check.
func BenchmarkHandleCheck(b *testing.B) {
	s := newTestServer(&testing.T{}, benchPolicy)
	h := s.Handler()
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = []byte(fmt.Sprintf(`{"path": ["user", "u%d", "trade"]}`, i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(bodies[i%len(bodies)]))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

// BenchmarkForwardAuth is BenchmarkHandleCheck's check asked as nginx
// asks it (auth_request, with the headers of docs/proxies/nginx.conf): the
// same decision, read from headers rather than a JSON body.
func BenchmarkForwardAuth(b *testing.B) {
	s := newTestServer(&testing.T{}, benchPolicy)
	fa, err := newForwardAuth(ForwardAuthConfig{Routes: []ForwardRoute{{Match: "/trade", Path: []string{"user", "{header:X-Api-Key}", "trade"}}}})
	if err != nil {
		b.Fatal(err)
	}
	s.forwardAuth = fa
	h := s.Handler()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("u%d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("GET", "/v1/forward-auth/nginx", nil)
		req.Header["X-Original-Uri"] = []string{"/trade?id=1"}
		req.Header["X-Original-Method"] = []string{"POST"}
		req.Header["X-Forwarded-For"] = []string{"203.0.113.7"}
		req.Header["X-Api-Key"] = keys[i%len(keys) : i%len(keys)+1]
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

// BenchmarkDecidePath is the decision alone (match, store, summary) on
// each store, 50 concurrent callers: what a check costs the service
// beside its transport.
func BenchmarkDecidePath(b *testing.B) {
	for _, st := range []string{"memory", "redis"} {
		b.Run(st, func(b *testing.B) {
			url := "memory"
			if st == "redis" {
				url = redistest.Start(b).URL()
			}
			s, err := New(context.Background(), Config{Store: url, PolicyData: []byte(benchPolicy), Timeout: time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(25)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				path := []string{"user", "", "trade"}
				for pb.Next() {
					path[1] = strconv.Itoa(int(n.Add(1) % 1000))
					c := answer.Get("http")
					c.Query.Paths = append(c.Query.Paths, policy.PathQuery{Path: path, Cost: 1})
					if s.pipe.Answer(context.Background(), c); c.Err != nil {
						b.Fatal(c.Err)
					}
					c.Buf = appendDecisionJSON(c.Buf[:0], &c.Decision, "")
					c.Put()
				}
			})
		})
	}
}
