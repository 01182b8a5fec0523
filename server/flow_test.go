package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFlowOfACheck makes two POST /v1/check on Redis, or SLUICE_FLOW of
// them: bench/flow.sh runs it with 1 and with 101 under coverage, and the
// blocks that run at least 100 times more in the second are what one check
// runs from the handler to the script and back, and not the store's
// background work (docs/architecture.md quotes the list). Every check is
// allowed.
func TestFlowOfACheck(t *testing.T) {
	n := 2
	if v := os.Getenv("SLUICE_FLOW"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			t.Fatalf("SLUICE_FLOW=%q: want 1 to 1000 checks", v)
		}
	}
	s, err := New(context.Background(), Config{Store: redistest.Start(t).URL(),
		PolicyData: []byte("schema: {user: {limits: [{algorithm: fixed_window, limit: 1000, window: 1m}]}}\n"),
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
	for range n { // the first check loads the script; the flow is the next
		check()
	}
}
