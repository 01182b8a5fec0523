package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// testPolicy is the limits.yaml of the known traces. At t0 (a multiple of
// every window) path api/<key>/trade hits three limits:
//
//	api/*            gcra burst 2, 1 per 10s: q=3, w=30
//	api/*/trade#0    fixed_window 5 per 1m:    q=5, w=60
//	api/*/trade#1    token_bucket 4, 2 per 1s: q=4, w=2
const testPolicy = `
schema:
  api:
    children:
      "*":
        limits: [2, 1, 10s]
        children:
          trade:
            limits:
              - {algorithm: fixed_window, limit: 5, window: 1m}
              - {algorithm: token_bucket, burst: 4, rate: 2, per: 1s}
          report:
            shadow: true
            limits: {algorithm: gate, interval: 1h}
          admin:
            unlimited: true
  once:
    children:
      "*":
        limits: {algorithm: gate, interval: 1h}
`

var t0 = time.Unix(1_800_000_000, 0) // a multiple of 1 h

// clock is a settable time for the checker.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// newChecker returns the policy's Checker on a store, deciding at the
// clock's time, or at the store's when clk is nil.
func newChecker(pol *policy.Policy, st store.Store, clk *clock) httplimit.PathChecker {
	c := &policy.Checker{Policy: policy.NewCurrent(pol), Store: st}
	if clk == nil {
		return c
	}
	return checkAt{c, clk}
}

// checkAt is a policy.Checker at a settable time.
type checkAt struct {
	c   *policy.Checker
	clk *clock
}

func (a checkAt) Decide(ctx context.Context, q *policy.Query, d *policy.Decision) error {
	q.Time = a.clk.Now()
	return a.c.Decide(ctx, q, d)
}

func mustPolicy(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("limits.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func memoryStore(t testing.TB) store.Store {
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	return st
}

func redisStore(t testing.TB, srv *redistest.Server) *redis.Store {
	t.Helper()
	return redisStoreAt(t, srv.URL())
}

// redisStoreAt opens a Redis store on url, closed when the test ends.
func redisStoreAt(t testing.TB, url string) *redis.Store {
	t.Helper()
	st, err := redis.Open(context.Background(), url, redis.Options{Timeout: time.Minute}) // not the default second: a busy machine can outlast it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// stores returns the stores every trace runs on: memory and a real Redis.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memoryStore(t) },
		"redis":  func(t *testing.T) store.Store { return redisStore(t, redistest.Start(t)) },
	}
}

// apiPath maps a request to api / <key> / <last URL path segment>.
func apiPath(r *http.Request, key string, p []string) []string {
	route := r.URL.Path
	for i := len(route) - 1; i >= 0; i-- {
		if route[i] == '/' {
			route = route[i+1:]
			break
		}
	}
	return append(p, "api", key, route)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("ok"))
})

// do sends one request through h and returns the recorded response.
func do(h http.Handler, method, target string, hdr map[string]string, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if remote != "" {
		r.RemoteAddr = remote
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// testTimeout bounds checks in tests far beyond any decision's time, so
// that no test depends on the scheduler meeting the default timeout (50ms) on
// a busy machine: a check that hit it would fail open and the test with
// it. Tests of the timeout itself set their own.
const testTimeout = time.Minute
