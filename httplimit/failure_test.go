package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRedisStopped stops the real Redis mid-test: fail-open serves the
// request without rate-limit headers, logs and counts the error;
// fail-closed answers 503 with a problem.
func TestRedisStopped(t *testing.T) {
	for _, policy := range []httplimit.FailurePolicy{httplimit.FailOpen, httplimit.FailClosed} {
		name := map[httplimit.FailurePolicy]string{httplimit.FailOpen: "open", httplimit.FailClosed: "closed"}[policy]
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newChecker(mustPolicy(t, testPolicy), redisStore(t, srv), nil)
			var logs syncBuffer
			var callbacks atomic.Int64
			l := httplimit.New(c, httplimit.Options{
				Path:         apiPath,
				Failure:      policy,
				Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
				OnStoreError: func(r *http.Request, err error) { callbacks.Add(1) },
			})
			h := l.Wrap(okHandler)

			// Before the stop, through a middleware whose timeout a busy
			// machine meets (l's 50ms default may not be), on the same store.
			warm := httplimit.New(c, httplimit.Options{Path: apiPath, Timeout: testTimeout, Logger: discard})
			w := do(warm.Wrap(okHandler), "GET", "/trade", nil, "")
			if w.Code != 200 || w.Header().Get("RateLimit") == "" {
				t.Fatalf("before the stop: %d %v", w.Code, w.Header())
			}
			srv.Stop()
			start := time.Now()
			for i := 0; i < 3; i++ {
				w = do(h, "GET", "/trade", nil, "")
				switch policy {
				case httplimit.FailOpen:
					if w.Code != 200 || w.Body.String() != "ok" {
						t.Fatalf("fail-open: %d %q", w.Code, w.Body)
					}
					for _, k := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
						if v := w.Header().Values(k); v != nil {
							t.Errorf("fail-open: %s %q", k, v)
						}
					}
				case httplimit.FailClosed:
					if w.Code != 503 {
						t.Fatalf("fail-closed: %d %q", w.Code, w.Body)
					}
					p := decodeProblem(t, w, w.Body.String())
					if p.Status != 503 || p.Title != "Service Unavailable" || p.Type != "about:blank" {
						t.Errorf("fail-closed: %+v", p)
					}
				}
			}
			if n := l.StoreErrors(); n != 3 {
				t.Errorf("StoreErrors %d, want 3", n)
			}
			if n := callbacks.Load(); n != 3 {
				t.Errorf("OnStoreError called %d times, want 3", n)
			}
			// One line a second: one, unless a busy machine took more
			// than a second for the three.
			most := 1 + int(time.Since(start)/time.Second)
			out := logs.String()
			if n := strings.Count(out, "rate-limit check failed"); n < 1 || n > most || !strings.Contains(out, "policy=fail-"+name) || !strings.Contains(out, "redis store") {
				t.Errorf("log (at most %d lines):\n%s", most, out)
			}
		})
	}
}

// TestRedisStalled stops the real Redis process (SIGSTOP) and resumes it
// only after the requests were answered: each was answered by the
// timeout, since the store could not answer it, and rate limiting comes
// back with Redis.
func TestRedisStalled(t *testing.T) {
	srv := redistest.Start(t)
	st := redisStore(t, srv)
	c := newChecker(mustPolicy(t, testPolicy), st, nil)
	open := httplimit.New(c, httplimit.Options{Path: apiPath, Logger: discard})
	closed := httplimit.New(c, httplimit.Options{Path: apiPath, Failure: httplimit.FailClosed, Logger: discard})
	// Before the stall, at a timeout a busy machine meets (not the 50ms
	// default of open and closed, whose store errors are counted).
	warm := httplimit.New(c, httplimit.Options{Path: apiPath, Timeout: testTimeout, Logger: discard})
	if w := do(warm.Wrap(okHandler), "GET", "/trade", nil, ""); w.Code != 200 || w.Header().Get("RateLimit") == "" {
		t.Fatalf("before the stall: %d %v", w.Code, w.Header())
	}

	resume := srv.Pause(t)
	for _, tc := range []struct {
		l    *httplimit.Middleware
		want int
	}{{open, 200}, {closed, 503}, {open, 200}} {
		if w := do(tc.l.Wrap(okHandler), "GET", "/trade", nil, ""); w.Code != tc.want {
			t.Errorf("status %d, want %d", w.Code, tc.want)
		}
	}
	if n := open.StoreErrors() + closed.StoreErrors(); n != 3 {
		t.Errorf("StoreErrors %d, want 3", n)
	}
	resume()
	// Redis is back: so is rate limiting.
	for {
		w := do(open.Wrap(okHandler), "GET", "/trade", nil, "")
		if w.Header().Get("RateLimit") != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTimeoutBound: a checker that blocks until its context ends is cut
// off at the configured timeout, and the request's own deadline wins when
// it is earlier. The deadlines are compared as times, so that a checker
// reached late on a busy machine sees the same ones.
func TestTimeoutBound(t *testing.T) {
	var gotDeadline atomic.Int64
	blocking := checkerFunc(func(ctx context.Context, _ []string, _ int64, _ *policy.Decision) error {
		d, _ := ctx.Deadline()
		gotDeadline.Store(d.UnixNano())
		<-ctx.Done()
		return ctx.Err()
	})
	l := httplimit.New(blocking, httplimit.Options{Timeout: 30 * time.Millisecond, Failure: httplimit.FailClosed, Logger: discard})
	start := time.Now()
	w := do(l.Wrap(okHandler), "GET", "/", nil, "")
	end := time.Now()
	if el := end.Sub(start); w.Code != 503 || el < 30*time.Millisecond {
		t.Errorf("status %d after %v", w.Code, el)
	}
	// The timeout runs from when the middleware had the request.
	if d := time.Unix(0, gotDeadline.Load()); d.Before(start.Add(30*time.Millisecond)) || d.After(end.Add(30*time.Millisecond)) {
		t.Errorf("checker saw a deadline %v after the request began, want 30ms after it was had (it took %v)", d.Sub(start), end.Sub(start))
	}

	// A request whose context ends first: the client is gone, no answer.
	// Its deadline, an hour before the middleware's, is the checker's; the
	// client goes away once the checker has it.
	calls := make(chan context.Context, 1)
	l = httplimit.New(checkerFunc(func(ctx context.Context, _ []string, _ int64, _ *policy.Decision) error {
		calls <- ctx
		<-ctx.Done()
		return ctx.Err()
	}), httplimit.Options{Timeout: 2 * time.Hour, Failure: httplimit.FailClosed, Logger: discard})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	go func() {
		got := <-calls
		if d, _ := got.Deadline(); !d.Equal(want) {
			t.Errorf("checker saw a deadline %v away, want the request's (an hour)", time.Until(d))
		}
		cancel()
	}()
	r, _ := http.NewRequestWithContext(ctx, "GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	rec := &recorder{h: http.Header{}}
	l.Wrap(okHandler).ServeHTTP(rec, r)
	if rec.code != 0 || len(rec.body) != 0 {
		t.Errorf("answered a gone client: %d %q", rec.code, rec.body)
	}
}

// TestCheckerErrorIsStoreError: any error but a bad request is a store
// failure.
func TestCheckerErrorIsStoreError(t *testing.T) {
	boom := errors.New("boom")
	l := httplimit.New(stubChecker{err: boom}, httplimit.Options{Logger: discard})
	if w := do(l.Wrap(okHandler), "GET", "/", nil, ""); w.Code != 200 || l.StoreErrors() != 1 {
		t.Errorf("status %d, StoreErrors %d", w.Code, l.StoreErrors())
	}
	l = httplimit.New(stubChecker{err: store.ErrBadRequest}, httplimit.Options{Logger: discard})
	if w := do(l.Wrap(okHandler), "GET", "/", nil, ""); w.Code != 400 || l.StoreErrors() != 0 {
		t.Errorf("bad request: status %d, StoreErrors %d", w.Code, l.StoreErrors())
	}
}

var discard = slog.New(slog.NewTextHandler(discardWriter{}, nil))

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

type checkerFunc func(ctx context.Context, path []string, cost int64, d *policy.Decision) error

func (f checkerFunc) Decide(ctx context.Context, q *policy.Query, d *policy.Decision) error {
	return f(ctx, q.Paths[0].Path, q.Paths[0].Cost, d)
}

// recorder is a minimal ResponseWriter.
type recorder struct {
	h    http.Header
	code int
	body []byte
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(200)
	r.body = append(r.body, p...)
	return len(p), nil
}
