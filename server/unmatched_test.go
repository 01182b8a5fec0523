package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the server's goroutines.
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

// TestUnmatchedPathsAreTold: under unmatched: allow, a path that matches
// no limit (a typo) is admitted, counted in sluice_unmatched_paths_total,
// and the first one at each place is logged; repeats are only counted.
func TestUnmatchedPathsAreTold(t *testing.T) {
	var log syncBuffer
	s, err := New(context.Background(), Config{Store: "memory", PolicyData: []byte(`
schema:
  user:
    children:
      "*":
        limits: [1, 1, 60]
        children:
          trade: {limits: [1, 1, 60]}
`)}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, body := range []string{`{"path": ["usr", "alex"]}`, `{"path": ["usr", "bo"]}`, `{"path": ["user", "alex", "trade"]}`} {
		if resp, _ := post(t, srv.URL+"/v1/check", body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", body, resp.StatusCode)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), "sluice_unmatched_paths_total 2\n") {
		t.Errorf("metrics: %s", grepLines(string(m), "sluice_unmatched"))
	}
	if n := strings.Count(log.String(), "matched no limit"); n != 1 || !strings.Contains(log.String(), "path=\"[usr alex]\"") {
		t.Errorf("want one log line, for the first unmatched path:\n%s", log.String())
	}
	// The log is bounded: places beyond the first maxUnmatchedLogged, and
	// more than one line a second, are only counted.
	var u unmatchedLog
	now := time.Now()
	if !u.first("a", now) || u.first("a", now.Add(2*time.Second)) || u.first("b", now.Add(time.Millisecond)) || !u.first("b", now.Add(2*time.Second)) {
		t.Error("first: want a once, b a second later")
	}
	for i := range 2 * maxUnmatchedLogged {
		u.first(strings.Repeat("x", i), now.Add(time.Duration(i+3)*time.Second))
	}
	if len(u.logged) != maxUnmatchedLogged {
		t.Errorf("%d places remembered, want at most %d", len(u.logged), maxUnmatchedLogged)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
