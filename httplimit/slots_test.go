package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

const slotsPolicy = `
schema:
  exports:
    children:
      "*": {limits: [{algorithm: concurrency, limit: 3, hold_for: 1m}]}
`

// slotStores returns a policy checker of slotsPolicy on the memory store
// and on a real Redis.
func slotCheckers(t *testing.T) map[string]*policy.Checker {
	p, err := policy.Parse("limits.yaml", []byte(slotsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redis.Open(context.Background(), redistest.Start(t).URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := memory.New()
	t.Cleanup(func() { rs.Close(); ms.Close() })
	out := map[string]*policy.Checker{}
	for name, st := range map[string]store.Store{"memory": ms, "redis": rs} {
		out[name] = &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
	}
	return out
}

// free returns the free slots of a key, by a peek.
func free(t *testing.T, c *policy.Checker, key string) int64 {
	t.Helper()
	var d policy.Decision
	if err := c.Decide(context.Background(), &policy.Query{Paths: []policy.PathQuery{{Path: []string{"exports", key}}}}, &d); err != nil {
		t.Fatal(err)
	}
	return d.Summary.Remaining
}

// TestSlotsHeldWhileServing: the middleware holds a slot while the
// handler runs. 60 clients race for 3 slots: never more than 3 handlers
// run at once, and 3 do (the first wait until 3 run); the ones refused
// get 429 with Retry-After. A handler that panics and one whose client
// goes away release their slots too.
func TestSlotsHeldWhileServing(t *testing.T) {
	for name, c := range slotCheckers(t) {
		t.Run(name, func(t *testing.T) {
			var running, most atomic.Int64
			full := make(chan struct{})
			var fullOnce sync.Once
			mw := httplimit.New(c, httplimit.Options{
				Key:  func(r *http.Request) (string, error) { return r.URL.Query().Get("tenant"), nil },
				Path: func(r *http.Request, key string, p []string) []string { return append(p, "exports", key) },
				// Not the default 50 ms: on a busy machine an acquire that
				// times out may still take its slot, held until its hold
				// ends, and the count below would be off by it.
				Timeout: time.Minute,
			})
			srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/panic":
					panic(http.ErrAbortHandler)
				case "/hang":
					<-r.Context().Done() // until the client goes
					return
				}
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n == 3 {
					fullOnce.Do(func() { close(full) })
				}
				<-full
			})))
			defer srv.Close()
			get := func(path, tenant string) (int, http.Header) {
				resp, err := http.Get(srv.URL + path + "?tenant=" + tenant)
				if err != nil {
					return 0, nil
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode, resp.Header
			}
			var ok, limited atomic.Int64
			var wg sync.WaitGroup
			for range 60 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						code, h := get("/work", "acme")
						if code == 200 {
							ok.Add(1)
							return
						}
						if code != 429 || h.Get("Retry-After") == "" {
							t.Errorf("status %d, headers %v", code, h)
							return
						}
						limited.Add(1)
					}
				}()
			}
			wg.Wait()
			if most.Load() != 3 || ok.Load() != 60 {
				t.Fatalf("most handlers at once %d (want 3), %d served (want 60)", most.Load(), ok.Load())
			}
			if n := free(t, c, "acme"); n != 3 {
				t.Fatalf("%d slots free after every request returned", n)
			}
			t.Logf("60 requests served, %d refused on the way, never more than %d at once", limited.Load(), most.Load())

			// A panicking handler: the connection drops, the slot is back.
			if code, _ := get("/panic", "boom"); code != 0 {
				t.Fatalf("a panicking handler answered %d", code)
			}
			if n := free(t, c, "boom"); n != 3 {
				t.Fatalf("after a panic, %d slots free", n)
			}

			// A client that goes away while its handler runs.
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hang?tenant=gone", nil)
			done := make(chan error)
			go func() {
				_, err := http.DefaultClient.Do(req)
				done <- err
			}()
			for free(t, c, "gone") != 2 { // the handler holds its slot
				time.Sleep(time.Millisecond)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the client's request: %v", err)
			}
			for free(t, c, "gone") != 3 {
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// TestSlotsRenewedWhileServing: a handler that runs longer than the
// lease keeps its slot, since the middleware renews it: the store's clock
// is moved by hand, a step after each renewal at the clock's time, to 3
// leases on. (A renewal that read the clock before a step, and reports
// after it, is not one at the clock's time: stepping on it would pass a
// lease on a busy machine.)
func TestSlotsRenewedWhileServing(t *testing.T) {
	p, err := policy.Parse("limits.yaml", []byte(strings.Replace(slotsPolicy, "limit: 3, hold_for: 1m", "limit: 1, hold_for: 30ms", 1)))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: t0}
	renewed := make(chan time.Time, 1)
	st := &onRenew{Store: memory.New(), clk: clk, renewed: renewed}
	c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
	release := make(chan struct{})
	mw := httplimit.New(c, httplimit.Options{
		Key:  func(r *http.Request) (string, error) { return "acme", nil },
		Path: func(r *http.Request, key string, p []string) []string { return append(p, "exports", key) },
	})
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	})))
	defer srv.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	for range 5 {
		for at := <-renewed; !at.Equal(clk.Now()); at = <-renewed {
		}
		clk.mu.Lock()
		clk.now = clk.now.Add(20 * time.Millisecond)
		clk.mu.Unlock()
	}
	// 100ms on, past 3 leases: the slot is still held.
	var d policy.Decision
	if err := c.Decide(context.Background(), &policy.Query{Paths: []policy.PathQuery{{Path: []string{"exports", "acme"}, Cost: 1}}}, &d); err != nil || d.Allowed {
		t.Fatalf("a second request while the first runs: %+v, %v", d, err)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("status %d", code)
	}
}

// onRenew is a store at a hand-moved clock that signals each renewal
// with the clock's time it was decided at (dropped when one waits).
type onRenew struct {
	store.Store
	clk     *clock
	renewed chan time.Time
}

func (s *onRenew) DecideAll(ctx context.Context, reqs []store.Request, res []algo.Result) (bool, error) {
	now := s.clk.Now()
	renew := false
	for i := range reqs {
		reqs[i].Time = now
		if _, op := reqs[i].Plan.Permit(); op == algo.Renew {
			renew = true
		}
	}
	pass, err := s.Store.DecideAll(ctx, reqs, res)
	if renew && err == nil && pass {
		select {
		case s.renewed <- now:
		default:
		}
	}
	return pass, err
}

// TestHeldSlotsCostNoGoroutine: 1000 requests hold slots at once, each
// in its handler: they run no goroutine but their own (a timer renews
// each, not a goroutine of its own), and once they return every slot is
// free.
func TestHeldSlotsCostNoGoroutine(t *testing.T) {
	p, err := policy.Parse("limits.yaml", []byte(strings.Replace(slotsPolicy, "limit: 3, hold_for: 1m", "limit: 1000, hold_for: 1m", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c := &policy.Checker{Policy: policy.NewCurrent(p), Store: memoryStore(t)}
	var serving sync.WaitGroup
	serving.Add(1000)
	release := make(chan struct{})
	h := httplimit.New(c, httplimit.Options{
		Key:  func(r *http.Request) (string, error) { return "acme", nil },
		Path: func(r *http.Request, key string, p []string) []string { return append(p, "exports", key) },
	}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serving.Done()
		<-release
	}))
	before := runtime.NumGoroutine()
	codes := make(chan int, 1000)
	for range 1000 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			codes <- w.Code
		}()
	}
	serving.Wait()
	if n := runtime.NumGoroutine() - before; n > 1000 {
		t.Errorf("1000 requests holding slots run %d goroutines, want 1000 (their own)", n)
	}
	close(release)
	for range 1000 {
		if code := <-codes; code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if n := free(t, c, "acme"); n != 1000 {
		t.Fatalf("%d slots free after every request returned, want 1000", n)
	}
}

// TestSlotsLostWhileServing: a request's slot is released behind its
// back while its handler runs; the next renewal finds it gone and cancels
// the request's context, with sluice.ErrLost as the cause.
func TestSlotsLostWhileServing(t *testing.T) {
	p, err := policy.Parse("limits.yaml", []byte(strings.Replace(slotsPolicy, "limit: 3, hold_for: 1m", "limit: 1, hold_for: 30ms", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c := &policy.Checker{Policy: policy.NewCurrent(p), Store: memoryStore(t)}
	permits := make(chan int64, 1)
	cause := make(chan error, 1)
	h := httplimit.New(c, httplimit.Options{
		Key:        func(r *http.Request) (string, error) { return "acme", nil },
		Path:       func(r *http.Request, key string, p []string) []string { return append(p, "exports", key) },
		OnDecision: func(r *http.Request, d *policy.Decision) { permits <- d.Permit },
	}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		cause <- context.Cause(r.Context())
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	q := &policy.Query{Op: policy.Release, Permit: <-permits, Paths: []policy.PathQuery{{Path: []string{"exports", "acme"}}}}
	var d policy.Decision
	if err := c.Decide(context.Background(), q, &d); err != nil {
		t.Fatal(err)
	}
	if err := <-cause; !errors.Is(err, sluice.ErrLost) {
		t.Fatalf("the request's context ended with %v, want sluice.ErrLost", err)
	}
}
