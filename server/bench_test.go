package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
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
