package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAnswerStatuses: the one mapping of check answers: 200 allowed, 429
// rate limited with Retry-After, 403 when the policy denies unmatched
// paths.
func TestAnswerStatuses(t *testing.T) {
	s, err := New(context.Background(), Config{Store: "memory", PolicyData: []byte(`
unmatched: deny
schema:
  user:
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
`)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	check := func(body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
		return w
	}
	if w := check(`{"path": ["user", "alex"]}`); w.Code != 200 {
		t.Errorf("first: %d %s", w.Code, w.Body)
	}
	w := check(`{"path": ["user", "alex"]}`)
	if w.Code != 429 || w.Result().Header.Get("Retry-After") == "" {
		t.Errorf("second: %d %v %s", w.Code, w.Header(), w.Body)
	}
	w = check(`{"path": ["order", "1"]}`)
	if w.Code != 403 || w.Result().Header.Get("Retry-After") != "" || !strings.Contains(w.Body.String(), `"matched":false`) {
		t.Errorf("unmatched under unmatched: deny: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

func TestStoreUpAndBuildInfo(t *testing.T) {
	s, err := New(context.Background(), Config{Store: redistest.Start(t).URL(), PolicyData: []byte("schema: {a: {limits: [1, 1, 1]}}\n"),
		Queues: map[string]QueueConfig{"jobs": {}}, Timeout: testTimeout}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := w.Body.String()
	if !strings.Contains(body, "\nsluice_store_up 1\n") || !strings.Contains(body, "\nsluice_build_info{goversion=") {
		t.Errorf("metrics lack sluice_store_up 1 or sluice_build_info:\n%s", body)
	}
}

// TestGrafanaDashboard: every metric docs/grafana-dashboard.json queries is
// one the service exports (on Redis with a queue and a home of global
// limits, which has them all). TestPrometheusDashboardQueries has a real
// Prometheus evaluate them.
func TestGrafanaDashboard(t *testing.T) {
	dash := readDashboard(t)
	cfg := Config{Store: redistest.Start(t).URL(), PolicyData: []byte("schema: {a: {limits: [1, 1, 1]}}\n"),
		Queues: map[string]QueueConfig{"jobs": {}}, Timeout: testTimeout}
	cfg.Redis.Home = redistest.Start(t).URL()
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// One check, so that the per-node series exist.
	s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"path": ["a"]}`)))
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	exported := w.Body.String()
	name := regexp.MustCompile(`sluice_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(m, "_bucket")
				if !strings.Contains(exported, "# TYPE "+base+" ") {
					t.Errorf("panel %q queries %s, which the service does not export", p.Title, m)
				}
			}
		}
	}
	// And every metric the service exports has a panel (settles, unmatched
	// paths and ignored request limits had none).
	var queries strings.Builder
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries.WriteString(tg.Expr + "\n")
		}
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sluice_[a-z_]+) `).FindAllStringSubmatch(exported, -1) {
		n++
		if !regexp.MustCompile(`\b` + m[1] + `(_bucket)?\b`).MatchString(queries.String()) {
			t.Errorf("no panel of docs/grafana-dashboard.json shows %s", m[1])
		}
	}
	if n < 20 {
		t.Errorf("the service exports only %d sluice_ metrics", n)
	}
}

// dashboard is what the tests read of docs/grafana-dashboard.json.
type dashboard struct {
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v", err)
	}
	return dash
}

// TestAdminTokenOnlyInTheHeader: a token in the query is no token.
func TestAdminTokenOnlyInTheHeader(t *testing.T) {
	s, err := New(context.Background(), Config{Store: "memory", AdminToken: "sekret", PolicyData: []byte("schema: {a: {limits: [1, 1, 1]}}\n")}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{"token=sekret", "access_token=sekret", "authorization=Bearer%20sekret"} {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/admin/v1/state?path=a&"+q, nil))
		if w.Code != http.StatusUnauthorized {
			t.Errorf("?%s: %d", q, w.Code)
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/admin/v1/state?path=a", nil)
	r.Header.Set("Authorization", "Bearer sekret")
	s.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("with the header: %d %s", w.Code, w.Body)
	}
}

// TestListsAnswer: a deny list's refusal is a 403 that names the entry,
// with no Retry-After (it never admits); an allow list's pass is a 200 with
// no RateLimit fields (no level was decided).
func TestListsAnswer(t *testing.T) {
	s := newTestServer(t, `
schema:
  ip:
    children:
      "*":
        limits: [0, 1, 60]
        allow: [10.0.0.0/8]
        deny: [203.0.113.0/24]
`)
	ask := func(ip string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"path": ["ip", "`+ip+`"]}`)))
		return w
	}
	w := ask("203.0.113.5")
	if w.Code != http.StatusForbidden || w.Header().Get("Retry-After") != "" || !strings.Contains(w.Body.String(), `"listed":"deny 203.0.113.0/24 at ip/*"`) {
		t.Errorf("deny list: %d %v %s", w.Code, w.Header(), w.Body)
	}
	for range 3 {
		if w := ask("10.1.1.1"); w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" || !strings.Contains(w.Body.String(), `"listed":"allow 10.0.0.0/8 at ip/*"`) {
			t.Fatalf("allow list: %d %v %s", w.Code, w.Header(), w.Body)
		}
	}
	if w := ask("192.0.2.1"); w.Code != http.StatusOK || strings.Contains(w.Body.String(), "listed") {
		t.Errorf("unlisted: %d %s", w.Code, w.Body)
	}
}

// TestListsOverGRPC: Envoy's descriptors meet the lists too, under
// unmatched: deny: an allow-listed descriptor is OK (not unmatched), a
// deny-listed one OVER_LIMIT.
func TestListsOverGRPC(t *testing.T) {
	s := newTestServer(t, `
unmatched: deny
schema:
  edge:
    children:
      remote_address:
        children:
          "*":
            limits: [0, 1, 60]
            allow: [10.0.0.0/8]
            deny: [203.0.113.0/24]
`)
	g := &rateLimitService{s: s}
	for _, tc := range []struct {
		ip   string
		want rlv3.RateLimitResponse_Code
	}{{"10.1.1.1", rlv3.RateLimitResponse_OK}, {"10.1.1.1", rlv3.RateLimitResponse_OK}, {"203.0.113.5", rlv3.RateLimitResponse_OVER_LIMIT}} {
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", tc.ip)}})
		if err != nil || r.OverallCode != tc.want || r.Statuses[0].Code != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.ip, r, err, tc.want)
		}
	}
}

// TestLegacyHeaders: with headers: legacy (or both) a check's answer has
// the older X-RateLimit-* fields, as the middleware's LegacyHeaders
// writes them; by default only the IETF fields.
func TestLegacyHeaders(t *testing.T) {
	for _, tc := range []struct {
		headers       string
		draft, legacy bool
	}{{"", true, false}, {"legacy", false, true}, {"both", true, true}} {
		s, err := New(context.Background(), Config{Store: "memory", PolicyData: []byte("schema:\n  a: {limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}\n"), Headers: tc.headers}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		var resp *http.Response
		for range 3 {
			if resp, err = http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"path": ["a"]}`)); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		h := resp.Header
		if (h.Get("RateLimit") != "") != tc.draft || (h.Get("X-RateLimit-Limit") != "") != tc.legacy {
			t.Errorf("headers %q: %v", tc.headers, h)
		}
		if tc.legacy && (resp.StatusCode != 429 || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset") != h.Get("Retry-After")) {
			t.Errorf("headers %q, the 3rd of 2: %d %v", tc.headers, resp.StatusCode, h)
		}
	}
}

// TestCheckSeveralPaths: "paths" decides per IP, per key and a quota
// together, all or nothing: a check its key's limit denies spends nothing
// of its IP's or its quota's budget, and the RateLimit fields name every
// policy; bad "paths" are a 400 that counts nothing.
func TestCheckSeveralPaths(t *testing.T) {
	s := newTestServer(t, `
schema:
  ip:
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 5, window: 1h}]}
  key:
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}
  quota:
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 100, window: 24h}]}
`)
	srv := httptest.NewServer(s.Handler()) // header values are the call's until written
	defer srv.Close()
	type answer struct {
		Code   int
		header http.Header
	}
	check := func(body string) (answer, DecisionJSON) {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d DecisionJSON
		json.NewDecoder(resp.Body).Decode(&d)
		return answer{resp.StatusCode, resp.Header}, d
	}
	const three = `{"paths": [["ip", "192.0.2.1"], ["key", "k1"], ["quota", "k1"]]}`
	for i, want := range []int{200, 200, 429, 429} {
		w, d := check(three)
		if w.Code != want || len(d.Levels) != 3 {
			t.Fatalf("check %d: %d, %d levels, want %d and 3", i+1, w.Code, len(d.Levels), want)
		}
		if rl := w.header.Get("RateLimit"); !strings.Contains(rl, `"ip/*"`) || !strings.Contains(rl, `"key/*"`) || !strings.Contains(rl, `"quota/*"`) {
			t.Errorf("check %d: RateLimit %q, want every policy named", i+1, rl)
		}
	}
	for path, want := range map[string]int64{`["ip", "192.0.2.1"]`: 3, `["quota", "k1"]`: 98} {
		if _, d := check(`{"path": ` + path + `, "cost": 0}`); d.Remaining != want {
			t.Errorf("%s after 2 admitted and 2 denied by the key: remaining %d, want %d", path, d.Remaining, want)
		}
	}
	many := make([]string, maxPaths+1)
	for i := range many {
		many[i] = `["ip", "x"]`
	}
	for _, bad := range []string{
		`{"path": ["ip", "a"], "paths": [["ip", "a"]]}`,
		`{"paths": []}`,
		`{"paths": [["ip", "a"], []]}`,
		`{"paths": [["ip", "a\u0001"]]}`,
		`{"paths": [` + strings.Join(many, ",") + `]}`,
	} {
		if w, _ := check(bad); w.Code != 400 {
			t.Errorf("%s: %d, want 400", bad, w.Code)
		}
	}
	if _, d := check(`{"path": ["ip", "192.0.2.1"], "cost": 0}`); d.Remaining != 3 {
		t.Errorf("bad checks counted: remaining %d", d.Remaining)
	}
}
