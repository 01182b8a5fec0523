package problem

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
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
