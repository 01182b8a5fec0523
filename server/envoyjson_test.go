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
