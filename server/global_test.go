package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestGlobalInService: two services, each a region on its own Redis,
// with redis.home naming one home Redis, decide a node that says global:
// true. Their shares are refilled in the background: together they admit
// the limit, and not one more, whichever region asks. The window is a
// day's; the test skips if it ended meanwhile.
func TestGlobalInService(t *testing.T) {
	home := redistest.Start(t)
	src := "schema:\n  api:\n    global: true\n    limits: {algorithm: fixed_window, limit: 30, window: 24h}\n" +
		"    children:\n      \"*\":\n        limits: {algorithm: fixed_window, limit: 1000, window: 1h}\n"
	day := func() int64 { return time.Now().UnixMicro() / (24 * time.Hour).Microseconds() }
	start := day()
	var regions []*Server
	for range 2 {
		cfg := Config{Store: redistest.Start(t).URL(), PolicyData: []byte(src), PolicyName: "t.yaml", Timeout: testTimeout}
		cfg.Redis.Home = home.URL()
		s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		regions = append(regions, s)
	}
	check := func(s *Server) bool {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"path": ["api", "alex"]}`)))
		return w.Code == 200
	}
	admitted := make([]int, len(regions))
	total := func() int { return admitted[0] + admitted[1] }
	for deadline := time.Now().Add(time.Minute); total() < 30 && time.Now().Before(deadline); {
		any := false
		for i, s := range regions {
			if check(s) {
				admitted[i]++
				any = true
			}
		}
		if !any {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 10 {
		for i, s := range regions {
			if check(s) {
				admitted[i]++
			}
		}
	}
	if day() != start {
		t.Skip("the day's window ended during the test")
	}
	if total() != 30 {
		t.Errorf("the regions admitted %v, %d in all, want the limit, 30", admitted, total())
	}
}
