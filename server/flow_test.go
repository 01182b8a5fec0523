package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFlowOfACheck makes two POST /v1/check on Redis, or one with
// SLUICE_FLOW=1: bench/flow.sh runs it both ways under coverage, and the
// blocks whose counts differ are what one check runs from the handler to
// the script and back (docs/architecture.md quotes the list).
func TestFlowOfACheck(t *testing.T) {
	s, err := New(context.Background(), Config{Store: redistest.Start(t).URL(),
		PolicyData: []byte("schema: {user: {limits: [{algorithm: fixed_window, limit: 100, window: 1m}]}}\n"),
		Timeout:    testTimeout}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	check := func() {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"path": ["user", "alex"]}`)))
		if w.Code != http.StatusOK {
			t.Fatalf("check: %d %s", w.Code, w.Body)
		}
	}
	check() // the first check loads the script; the flow is the second
	if os.Getenv("SLUICE_FLOW") != "1" {
		check()
	}
}
