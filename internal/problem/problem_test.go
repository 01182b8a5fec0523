package problem

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusTeapot, "", "", `says "no" <now>`, func(b []byte) []byte { return append(b, `,"extra":1`...) })
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
	denied := sluice.Level{Result: algo.Result{RetryAfter: time.Second}}
	shadowDenied := sluice.Level{Shadow: true, Result: algo.Result{RetryAfter: time.Second}}
	allowed := sluice.Level{Result: algo.Result{Allowed: true}}
	for _, c := range []struct {
		d    sluice.Decision
		want int
	}{
		{sluice.Decision{Allowed: true, Matched: true, Levels: []sluice.Level{allowed}}, http.StatusOK},
		{sluice.Decision{Allowed: true, Matched: false}, http.StatusOK}, // unmatched: allow
		{sluice.Decision{Matched: true, Levels: []sluice.Level{allowed, denied}}, http.StatusTooManyRequests},
		{sluice.Decision{Matched: false}, http.StatusForbidden},
		{sluice.Decision{Matched: false, Levels: []sluice.Level{allowed, shadowDenied}}, http.StatusForbidden},
		{sluice.Decision{Matched: false, Levels: []sluice.Level{denied}}, http.StatusTooManyRequests}, // over a quota too
	} {
		if got := Status(&c.d); got != c.want {
			t.Errorf("Status(%+v) = %d, want %d", c.d, got, c.want)
		}
	}
}
