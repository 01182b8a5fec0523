package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// delayMiddleware is a middleware over a policy whose node admits 1 at
// once, then 1 each period, holding a request up to 10 periods (the
// second waits a period); it records each decision's delay and counts the
// handler's calls. The tests that must see a request still held, or
// still delayed, use a period of a minute: longer than any test waits.
func delayMiddleware(t *testing.T, maxWaiting int, period time.Duration) (*httplimit.Middleware, http.Handler, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	p, err := policy.Parse("delay.yaml", []byte(fmt.Sprintf(`
schema:
  "*":
    limits: {algorithm: gcra, burst: 0, count: 1, period: %v}
    delay: {max: %v}
`, period, min(10*period, time.Minute))))
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
	_, h, lastDelay, served := delayMiddleware(t, 0, 100*time.Millisecond)
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
// Each is held a minute or more: the test cancels them.
func TestDelayClientGone(t *testing.T) {
	m, h, lastDelay, served := delayMiddleware(t, 0, time.Minute)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // at once
	// held serves a request until it is held, then its client goes away.
	held := func() {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			close(done)
		}()
		for m.Waiting() == 0 { // held
			select {
			case <-done:
				t.Fatalf("answered, not held (delay %v)", time.Duration(lastDelay.Load()))
			case <-time.After(time.Millisecond):
			}
		}
		cancel()
		<-done
		if served.Load() != 1 || m.Waiting() != 0 {
			t.Fatalf("served %d, waiting %d; want 1 and 0", served.Load(), m.Waiting())
		}
	}
	held()
	// Given back: a third request is held a minute, as the second was,
	// and not two (the second's units still taken), less the time passed.
	held()
	if got := time.Duration(lastDelay.Load()); got > time.Minute || got <= 0 {
		t.Errorf("after the client left, a request waits %v; want at most a minute (units given back)", got)
	}
}

// TestDelayMaxWaiting: with no room to hold a request, a delayed one is
// answered 429 at once with Retry-After, and its units go back.
func TestDelayMaxWaiting(t *testing.T) {
	_, h, lastDelay, served := delayMiddleware(t, -1, time.Minute)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	for range 3 { // each would wait a minute; each is refused and given back
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != http.StatusTooManyRequests || ra < 1 || ra > 60 {
			t.Fatalf("%d %v, want 429 with Retry-After: at most 60", w.Code, w.Header())
		}
		if got := time.Duration(lastDelay.Load()); got > time.Minute || got <= 0 {
			t.Fatalf("delay %v: the refused requests' units were not given back", got)
		}
	}
	if served.Load() != 1 {
		t.Errorf("served %d, want 1", served.Load())
	}
}
