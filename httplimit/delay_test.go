package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// delayMiddleware is a middleware over a policy whose node admits 1 at
// once, then 10 a second, holding a request up to 1s (the second waits
// 100ms); it records each decision's delay and counts the handler's calls.
func delayMiddleware(t *testing.T, maxWaiting int) (*httplimit.Middleware, http.Handler, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	p, err := policy.Parse("delay.yaml", []byte(`
schema:
  "*":
    limits: {algorithm: gcra, burst: 0, count: 10, period: 1s}
    delay: {max: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	var lastDelay, served atomic.Int64
	m := httplimit.New(&policy.Checker{Policy: policy.NewCurrent(p), Store: st}, httplimit.Options{
		Key:        func(*http.Request) (string, error) { return "k", nil },
		MaxWaiting: maxWaiting,
		OnDecision: func(r *http.Request, d *policy.Decision) { lastDelay.Store(int64(d.Delay)) },
	})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	return m, h, &lastDelay, &served
}

// TestDelayHolds: a delayed request is held and then served. Its delay is
// 100ms less the time since the first request (bounds that hold however
// slow the machine is).
func TestDelayHolds(t *testing.T) {
	_, h, lastDelay, served := delayMiddleware(t, 0)
	start := time.Now()
	for i := range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 || served.Load() != int64(i+1) {
			t.Fatalf("request %d: %d, served %d", i+1, w.Code, served.Load())
		}
	}
	got := time.Duration(lastDelay.Load())
	if least := 100*time.Millisecond - time.Since(start); got > 100*time.Millisecond || got < least {
		t.Errorf("the second request's delay: %v, want between %v and 100ms", got, least)
	}
}

// TestDelayClientGone: a held request whose client goes away is not served,
// and its units go back: the next request waits as the second would have.
func TestDelayClientGone(t *testing.T) {
	m, h, lastDelay, served := delayMiddleware(t, 0)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // at once
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		close(done)
	}()
	for m.Waiting() == 0 { // held
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if served.Load() != 1 || m.Waiting() != 0 {
		t.Fatalf("served %d, waiting %d; want 1 and 0", served.Load(), m.Waiting())
	}
	// Given back: a third request is held 100ms, as the second was, and
	// not 200ms (the second's units still taken), less the time passed.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if got := time.Duration(lastDelay.Load()); got > 100*time.Millisecond {
		t.Errorf("after the client left, a request waits %v; want at most 100ms (units given back)", got)
	}
}

// TestDelayMaxWaiting: with no room to hold a request, a delayed one is
// answered 429 at once with Retry-After, and its units go back.
func TestDelayMaxWaiting(t *testing.T) {
	_, h, lastDelay, served := delayMiddleware(t, -1)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	for range 3 { // each would wait 100ms; each is refused and given back
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("%d %v, want 429 with Retry-After: 1", w.Code, w.Header())
		}
		if got := time.Duration(lastDelay.Load()); got > 100*time.Millisecond {
			t.Fatalf("delay %v: the refused requests' units were not given back", got)
		}
	}
	if served.Load() != 1 {
		t.Errorf("served %d, want 1", served.Load())
	}
}
