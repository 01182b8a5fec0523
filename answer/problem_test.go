package answer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	writeProblem(rec, http.StatusTeapot, "", "", `says "no" <now>`, func(b []byte) []byte { return append(b, `,"extra":1`...) })
	if rec.Code != http.StatusTeapot || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var p struct {
		Type, Title, Detail string
		Status, Extra       int
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if p.Type != "about:blank" || p.Title != "I'm a teapot" || p.Status != 418 || p.Detail != `says "no" <now>` || p.Extra != 1 {
		t.Errorf("body %+v", p)
	}
}

func TestStatus(t *testing.T) {
	denied := policy.Level{Result: algo.Result{RetryAfter: time.Second}}
	shadowDenied := policy.Level{Shadow: true, Result: algo.Result{RetryAfter: time.Second}}
	allowed := policy.Level{Result: algo.Result{Allowed: true}}
	for _, c := range []struct {
		d    policy.Decision
		want int
	}{
		{policy.Decision{Allowed: true, Matched: true, Levels: []policy.Level{allowed}}, http.StatusOK},
		{policy.Decision{Allowed: true, Matched: false}, http.StatusOK}, // unmatched: allow
		{policy.Decision{Matched: true, Levels: []policy.Level{allowed, denied}}, http.StatusTooManyRequests},
		{policy.Decision{Matched: false}, http.StatusForbidden},
		{policy.Decision{Matched: false, Levels: []policy.Level{allowed, shadowDenied}}, http.StatusForbidden},
		{policy.Decision{Matched: false, Levels: []policy.Level{denied}}, http.StatusTooManyRequests}, // over a quota too
	} {
		if got := status(&c.d, false); got != c.want {
			t.Errorf("status(%+v) = %d, want %d", c.d, got, c.want)
		}
	}
}
