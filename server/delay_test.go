package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const delayTestPolicy = `
schema:
  edge:
    children:
      remote_address:
        children:
          "*":
            limits: {algorithm: gcra, burst: 0, count: 1, period: 1s}
            delay: {max: 5s}
          # Held for 20s or 40s: longer than any test waits, so that a
          # request is still held when the test looks, however slow the
          # machine (the test cancels it).
          "10.0.0.2": &slow
            limits: {algorithm: gcra, burst: 0, count: 1, period: 20s}
            delay: {max: 1m}
          "10.0.0.3": *slow
          "10.0.0.9": *slow
`

// TestDelayAnswers: the HTTP check answers a delayed request at once with
// delay_ns; gRPC holds it and answers OK, refuses one whose deadline
// comes before its delay ends (giving its units back), and refuses one
// when max_waiting requests are held.
func TestDelayAnswers(t *testing.T) {
	s := newTestServer(t, delayTestPolicy) // the store's clock stands still
	s.pipe.MaxWaiting = 1
	w := httptest.NewRecorder()
	body := `{"path": ["edge", "remote_address", "10.0.0.1"]}`
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	if w.Code != 200 || strings.Contains(w.Body.String(), "delay_ns") {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"delay_ns":1000000000`) {
		t.Fatalf("second: %d %s, want 200 with delay_ns 1s", w.Code, w.Body)
	}

	g := &rateLimitService{s: s}
	ask := func(ctx context.Context) (*rlv3.RateLimitResponse, error) {
		return g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.2")}})
	}
	if r, err := ask(context.Background()); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("gRPC first: %v %v", r, err)
	}
	// A deadline before the delay's end (20s): refused at once, given back.
	short, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r, err := ask(short)
	cancel()
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("gRPC with a short deadline: %v %v, want OVER_LIMIT", r, err)
	}
	// Given back: the key's next request would wait 20s, not 40s.
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"path": ["edge", "remote_address", "10.0.0.2"], "cost": 0}`)))
	if !strings.Contains(w.Body.String(), `"reset_after_ns":20000000000`) {
		t.Errorf("after the refused request, the key's state: %s; want its TAT 20s ahead (given back)", w.Body)
	}
	// Held: one at a time; while one is held (for 20s, cancelled by the
	// test), the next (which would wait 40s) is refused.
	ask3 := func(ctx context.Context) (*rlv3.RateLimitResponse, error) {
		return g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.3")}})
	}
	if r, err := ask3(context.Background()); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("gRPC first of 10.0.0.3: %v %v", r, err)
	}
	hctx, cancelHeld := context.WithCancel(context.Background())
	held := make(chan error)
	go func() {
		_, err := ask3(hctx)
		held <- err
	}()
	for s.pipe.Waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if r, err := ask3(context.Background()); err != nil || r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("gRPC beyond max_waiting: %v %v, want OVER_LIMIT", r, err)
	}
	cancelHeld()
	if err := <-held; status.Code(err) != codes.Canceled {
		t.Errorf("gRPC held, its caller gone: %v, want Canceled", err)
	}
	// Held for its delay (1s), then answered OK.
	ask4 := func() (*rlv3.RateLimitResponse, error) {
		return g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.4")}})
	}
	for i := range 2 {
		if r, err := ask4(); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
			t.Errorf("gRPC %d of 10.0.0.4 (the second held 1s): %v %v, want OK", i+1, r, err)
		}
	}
}

// TestForwardAuthDelay: the forward-auth endpoint holds a delayed request
// before its 200 (so the proxy in front holds it), and a proxy that gives
// up gets the units back.
func TestForwardAuthDelay(t *testing.T) {
	s := newTestServer(t, delayTestPolicy)
	fa, err := newForwardAuth(ForwardAuthConfig{Routes: []ForwardRoute{{Match: "/", Path: []string{"edge", "remote_address", "{header:X-Ip}"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.forwardAuth = fa
	ask := func(ctx context.Context, ip string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/forward-auth", nil).WithContext(ctx)
		r.Header.Set("X-Forwarded-Uri", "/page")
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Ip", ip)
		s.Handler().ServeHTTP(w, r)
		return w
	}
	if w := ask(context.Background(), "10.0.0.9"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// The proxy gives up while the second is held (for 20s, longer than
	// the test takes to give up): nothing is answered and its units go back.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- ask(ctx, "10.0.0.9") }()
	for s.pipe.Waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"path": ["edge", "remote_address", "10.0.0.9"], "cost": 0}`)))
	if !strings.Contains(w.Body.String(), `"reset_after_ns":20000000000`) {
		t.Errorf("after the proxy gave up: %s; want the TAT 20s ahead (given back)", w.Body)
	}
	// Held (1s), then allowed.
	for i := range 2 {
		if w := ask(context.Background(), "10.0.0.10"); w.Code != 200 || w.Result().Header.Get("RateLimit") == "" {
			t.Errorf("request %d (the second held): %d %v, want 200 with the fields", i+1, w.Code, w.Result().Header)
		}
	}
}
