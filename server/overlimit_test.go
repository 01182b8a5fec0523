package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverLimitCacheInService: on Redis the service's over-limit cache is
// on by default: repeated denied checks are answered from it (counted in
// /metrics), an admin reset clears the key at once, and a policy reload
// clears the cache; redis.over_limit_cache -1 turns it off.
func TestOverLimitCacheInService(t *testing.T) {
	policyFile := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(limit int) {
		src := "schema:\n  user:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: " + strconv.Itoa(limit) + ", window: 1h}]}\n"
		if err := os.WriteFile(policyFile, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rd := redistest.Start(t)
	for _, size := range []int{0, -1} {
		write(1)
		s, err := New(context.Background(), Config{Store: rd.URL(), Policy: policyFile, AdminToken: "tok", Timeout: testTimeout,
			Redis: RedisConfig{Prefix: "t" + strconv.Itoa(size) + ":", OverLimitCache: size}},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		h := s.Handler()
		do := func(method, path, body string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(method, path, strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer tok")
			h.ServeHTTP(w, r)
			return w
		}
		check := func() int { return do("POST", "/v1/check", `{"path": ["user", "alex"]}`).Code }
		hits := func() string {
			m := regexp.MustCompile(`(?m)^sluice_over_limit_cache_hits_total (\S+)`).FindStringSubmatch(do("GET", "/metrics", "").Body.String())
			if m == nil {
				return "absent"
			}
			return m[1]
		}
		if size < 0 {
			if a, b, c := check(), check(), check(); a != 200 || b != 429 || c != 429 || hits() != "absent" {
				t.Fatalf("cache off: %d %d %d, hits metric %s", a, b, c, hits())
			}
			continue
		}
		if check() != 200 || check() != 429 || hits() != "0" {
			t.Fatalf("first two checks; hits %s", hits())
		}
		for range 5 {
			if check() != 429 {
				t.Fatal("a cached denial was allowed")
			}
		}
		if hits() != "5" {
			t.Fatalf("hits %s after 5 denials, want 5", hits())
		}
		if w := do("DELETE", "/admin/v1/state?path=user&path=alex", ""); w.Code != 200 {
			t.Fatalf("reset: %d %s", w.Code, w.Body)
		}
		if check() != 200 || check() != 429 {
			t.Fatal("after a reset: want allowed, then denied")
		}
		write(3)
		if !s.reload("test") {
			t.Fatal("reload failed")
		}
		if code := check(); code != 200 {
			t.Fatalf("after raising the limit: %d", code)
		}
	}
}

// TestLeasesInService: a node with lease: true on Redis admits a hot key's
// checks from leased quota (far fewer script calls than checks), and
// exactly its limit.
func TestLeasesInService(t *testing.T) {
	rd := redistest.Start(t)
	src := "schema:\n  api:\n    lease: true\n    limits: {algorithm: fixed_window, limit: 1500, window: 1h}\n"
	s, err := New(context.Background(), Config{Store: rd.URL(), PolicyData: []byte(src), PolicyName: "t.yaml", Timeout: testTimeout},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	check := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"path": ["api"]}`)))
		return w.Code
	}
	check() // loads the scripts
	calls := func() int {
		info, err := rd.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=(\d+)`).FindAllStringSubmatch(info, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
		return n
	}
	before, allowed := calls(), 1
	for range 999 {
		if check() == 200 {
			allowed++
		}
	}
	if n := calls() - before; n > 200 {
		t.Fatalf("%d script calls for 999 checks of a leased node", n)
	}
	// The metrics: one key followed, and what its lease holds unused is
	// counted in Redis beside what was admitted, within the limit.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	gauge := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)`).FindStringSubmatch(w.Body.String())
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if keys, units := gauge("sluice_leased_keys"), gauge("sluice_leased_units"); keys != 1 || units < 0 || int(units)+allowed > 1500 {
		t.Fatalf("sluice_leased_keys %v, sluice_leased_units %v with %d admitted", keys, units, allowed)
	}
	for range 1000 {
		if check() == 200 {
			allowed++
		}
	}
	// One instance uses up every lease it takes, and near the limit it
	// decides exactly: the limit, no more, no less.
	if allowed != 1500 {
		t.Fatalf("%d allowed of a limit of 1500", allowed)
	}
}
