package answer

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redis"
)

// TestStoreFailureAnsweredOnce: with its real Redis stopped, every call
// is answered by on_store_error (allowed without RateLimit fields, or 503
// with Retry-After: 1), counted once each and logged at most a line a
// second; a bad request is a 400 and no store failure; a caller gone
// before the decision gets nothing decided.
func TestStoreFailureAnsweredOnce(t *testing.T) {
	pol, err := policy.Parse("limits.yaml", []byte("schema:\n  a:\n    limits: [{algorithm: fixed_window, limit: 5, window: 1m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checker := &policy.Checker{Policy: policy.NewCurrent(pol), Store: st}
	srv.Stop()
	for _, open := range []bool{true, false} {
		var logs bytes.Buffer
		failed := 0
		p := &Pipeline{Checker: checker, Timeout: time.Minute, FailOpen: open, Log: slog.New(slog.NewTextHandler(&logs, nil)),
			StoreFailed: func(*Call, error) { failed++ }}
		call := func(ctx context.Context, cost int64) (*Call, http.Header) {
			c := Get("http")
			c.Query.Paths = append(c.Query.Paths, policy.PathQuery{Path: []string{"a"}, Cost: cost})
			p.Answer(ctx, c)
			h := http.Header{}
			c.SetHeader(h, true, true)
			return c, h
		}
		const calls = 3
		for i := 0; i < calls; i++ {
			c, h := call(context.Background(), 1)
			want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[open]
			if !c.Failed || c.Status != want || c.Decision.Allowed != open || h.Get("RateLimit") != "" || h.Get("X-RateLimit-Limit") != "" {
				t.Errorf("open %v: failed %v, status %d, allowed %v, header %v", open, c.Failed, c.Status, c.Decision.Allowed, h)
			}
			if retry := h.Get("Retry-After"); retry != map[bool]string{true: "", false: "1"}[open] {
				t.Errorf("open %v: Retry-After %q", open, retry)
			}
			c.Put()
		}
		if n := strings.Count(logs.String(), "the store failed"); failed != calls || n < 1 || n > calls {
			t.Errorf("open %v: %d failures counted, %d logged, want %d counted", open, failed, n, calls)
		}
		if c, _ := call(context.Background(), -1); c.Status != http.StatusBadRequest || c.Failed || failed != calls {
			t.Errorf("open %v: a negative cost: status %d, failed %v, %d counted", open, c.Status, c.Failed, failed)
		}
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		if c, _ := call(gone, 1); !c.Gone || c.Failed || c.Status != 0 || failed != calls {
			t.Errorf("open %v: a caller gone: %+v, %d counted", open, c, failed)
		}
	}
}
