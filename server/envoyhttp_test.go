package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestEnvoyJSON: POST /json answers Envoy's RateLimitRequest in JSON as
// envoyproxy/ratelimit does on its PORT: the decision of ShouldRateLimit
// in JSON, 200 then 429 once the limit is spent; 400 for a body that is
// not a request and for a request ShouldRateLimit refuses, 413 for one
// over the bound.
func TestEnvoyJSON(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gw.yaml"), []byte("domain: gw\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir}).Handler()
	post := func(method, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/json", strings.NewReader(body)))
		return w
	}
	req := `{"domain": "gw", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}]}`
	for i, want := range []int{200, 200, 429} {
		w := post(http.MethodPost, req)
		var resp rlv3.RateLimitResponse
		if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != want || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("check %d: %d %q %v, want %d", i, w.Code, w.Body, err, want)
		}
		st := resp.Statuses[0]
		if wantCode := map[int]rlv3.RateLimitResponse_Code{200: rlv3.RateLimitResponse_OK, 429: rlv3.RateLimitResponse_OVER_LIMIT}[want]; resp.OverallCode != wantCode ||
			st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("check %d: %v", i, &resp)
		}
	}
	for _, c := range []struct {
		method, body string
		code         int
		says         string
	}{
		{http.MethodPost, `{"domain": "gw"`, 400, "not a RateLimitRequest"},
		{http.MethodPost, `{"domain": "gw", "nope": 1}`, 400, "not a RateLimitRequest"},
		{http.MethodGet, "", 400, "not a RateLimitRequest"},
		{http.MethodPost, `{"domain": "", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}`, 400, "domain must not be empty"},
		{http.MethodPost, `{"domain": "gw", "descriptors": []}`, 400, "descriptor list must not be empty"},
		{http.MethodPost, `{"domain": "gw", "descriptors": [{"entries": [{"key": "` + strings.Repeat("k", maxBodyBytes) + `"}]}]}`, 413, "larger than"},
	} {
		if w := post(c.method, c.body); w.Code != c.code || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s %.60q: %d %q, want %d saying %q", c.method, c.body, w.Code, w.Body, c.code, c.says)
		}
	}
}

// TestRLConfig: GET /rlconfig on the admin listener (Envoy's DEBUG_PORT)
// prints the configuration in force as envoyproxy/ratelimit prints it, a
// line per descriptor with a rate_limit; the HTTP API's listener has no
// such endpoint, and a policy not converted from Envoy's configuration
// prints nothing. envoydiff compares it with envoyproxy/ratelimit's own.
func TestRLConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5, name: specific_limit}
        shadow_mode: true
  - key: ldap
    rate_limit: {unlimited: true}
  - key: bare
`
	if err := os.WriteFile(filepath.Join(dir, "e.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir})
	get := func(h http.Handler) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/rlconfig", nil))
		return w
	}
	want := "example7.key_1_value_1.user: unit=SECOND requests_per_unit=5, shadow_mode: true, quota_mode: false\n" +
		"example7.ldap: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
	if w := get(s.handler(true, false)); w.Code != 200 || w.Body.String() != want {
		t.Errorf("/rlconfig: %d\n%s\nwant\n%s", w.Code, w.Body, want)
	}
	if w := get(s.Handler()); w.Code != 404 {
		t.Errorf("/rlconfig on the HTTP API: %d", w.Code)
	}
	if w := get(newTestServer(t, "schema:\n  a:\n    limits: [1, 1, 60]\n").handler(true, false)); w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("/rlconfig of a limits.yaml: %d %q", w.Code, w.Body)
	}
}
