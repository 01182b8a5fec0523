package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// step is one request of a known trace and the response it must get.
type step struct {
	at     time.Duration // after t0
	path   string
	cost   string // X-Cost header; "" for 1
	status int
	hdr    map[string]string // "" value: the header must be absent
}

// traceDraft is the trace of the draft headers; see testPolicy.
var traceDraft = []step{
	{0, "/trade", "", 200, map[string]string{
		"RateLimit-Policy": `"api/*";q=3;w=30, "api/*/trade#0";q=5;w=60, "api/*/trade#1";q=4;w=2`,
		"RateLimit":        `"api/*";r=2;t=10, "api/*/trade#0";r=4;t=60, "api/*/trade#1";r=3;t=1`,
		"Retry-After":      "",
	}},
	{0, "/trade", "", 200, map[string]string{
		"RateLimit": `"api/*";r=1;t=20, "api/*/trade#0";r=3;t=60, "api/*/trade#1";r=2;t=1`,
	}},
	{0, "/trade", "", 200, map[string]string{
		"RateLimit": `"api/*";r=0;t=30, "api/*/trade#0";r=2;t=60, "api/*/trade#1";r=1;t=2`,
	}},
	// The gcra level denies: it admits the next unit in 10 s. The others
	// allowed it but record nothing.
	{0, "/trade", "", 429, map[string]string{
		"RateLimit-Policy": `"api/*";q=3;w=30, "api/*/trade#0";q=5;w=60, "api/*/trade#1";q=4;w=2`,
		"RateLimit":        `"api/*";r=0;t=10, "api/*/trade#0";r=2;t=60, "api/*/trade#1";r=1;t=2`,
		"Retry-After":      "10",
		"Content-Type":     "application/problem+json",
	}},
	// 9.5 s later: still 0.5 s to go, rounded up to 1.
	{9500 * time.Millisecond, "/trade", "", 429, map[string]string{
		"RateLimit":   `"api/*";r=0;t=1, "api/*/trade#0";r=2;t=51, "api/*/trade#1";r=4;t=0`,
		"Retry-After": "1",
	}},
	{10 * time.Second, "/trade", "", 200, map[string]string{
		"RateLimit": `"api/*";r=0;t=30, "api/*/trade#0";r=1;t=50, "api/*/trade#1";r=3;t=1`,
	}},
	// A cost above every limit can never be admitted: no Retry-After.
	{20 * time.Second, "/trade", "9", 429, map[string]string{
		"RateLimit":   `"api/*";r=1;t=20, "api/*/trade#0";r=1;t=40, "api/*/trade#1";r=4;t=0`,
		"Retry-After": "",
	}},
	// The shadow level is checked but not advertised.
	{20 * time.Second, "/report", "", 200, map[string]string{
		"RateLimit-Policy": `"api/*";q=3;w=30`,
		"RateLimit":        `"api/*";r=0;t=30`,
	}},
	// An unlimited node below a limited one: the level above still applies.
	{20 * time.Second, "/admin", "", 429, map[string]string{
		"RateLimit":   `"api/*";r=0;t=10`,
		"Retry-After": "10",
	}},
}

// traceLegacy is the same trace with the legacy headers: the summary is
// the enforced level with the least remaining, Reset its full reset
// (allowed) or Retry-After (denied).
var traceLegacy = []step{
	{0, "/trade", "", 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "60", "RateLimit": "", "RateLimit-Policy": ""}},
	{0, "/trade", "", 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60"}},
	{0, "/trade", "", 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60"}},
	{0, "/trade", "", 429, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "10", "Retry-After": "10"}},
	{9500 * time.Millisecond, "/trade", "", 429, map[string]string{"X-RateLimit-Reset": "1", "Retry-After": "1"}},
	{10 * time.Second, "/trade", "", 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50"}},
	{20 * time.Second, "/trade", "9", 429, map[string]string{"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40", "Retry-After": ""}},
	{20 * time.Second, "/report", "", 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}},
}

var traceNone = []step{
	{0, "/trade", "", 200, map[string]string{"X-RateLimit-Limit": "", "RateLimit": "", "RateLimit-Policy": "", "Retry-After": ""}},
	{0, "/trade", "", 200, nil},
	{0, "/trade", "", 200, nil},
	{0, "/trade", "", 429, map[string]string{"X-RateLimit-Limit": "", "RateLimit": "", "Retry-After": "10"}},
}

func costHeader(r *http.Request) int64 {
	if v := r.Header.Get("X-Cost"); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 1
}

// TestTraces runs the known traces for each header style on the memory
// store and on a real Redis, and checks every header's exact value.
func TestTraces(t *testing.T) {
	for _, style := range []struct {
		name  string
		style httplimit.HeaderStyle
		steps []step
	}{
		{"draft", httplimit.DraftHeaders, traceDraft},
		{"legacy", httplimit.LegacyHeaders, traceLegacy},
		{"none", httplimit.NoHeaders, traceNone},
	} {
		for name, open := range stores(t) {
			t.Run(style.name+"/"+name, func(t *testing.T) {
				clk := &clock{}
				c := newChecker(mustPolicy(t, testPolicy), open(t), clk)
				h := httplimit.New(c, httplimit.Options{
					Timeout: testTimeout,
					Path:    apiPath,
					Cost:    costHeader,
					Headers: style.style,
				}).Wrap(okHandler)
				for i, s := range style.steps {
					clk.Set(t0.Add(s.at))
					hdr := map[string]string{}
					if s.cost != "" {
						hdr["X-Cost"] = s.cost
					}
					w := do(h, "GET", "http://x"+s.path, hdr, "192.0.2.7:4711")
					if w.Code != s.status {
						t.Fatalf("step %d: status %d, want %d; body %s", i, w.Code, s.status, w.Body)
					}
					for k, want := range s.hdr {
						got := w.Header().Values(k)
						switch {
						case want == "" && len(got) > 0:
							t.Errorf("step %d: %s: %q, want none", i, k, got)
						case want != "" && (len(got) != 1 || got[0] != want):
							t.Errorf("step %d: %s:\n got %q\nwant %q", i, k, got, want)
						}
					}
					if w.Code == 200 && w.Body.String() != "ok" {
						t.Errorf("step %d: handler not reached: %q", i, w.Body)
					}
				}
			})
		}
	}
}

// TestHeaderNames pins the canonical forms the middleware assigns.
func TestHeaderNames(t *testing.T) {
	for _, n := range []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"} {
		if c := textproto.CanonicalMIMEHeaderKey(n); c != n {
			t.Errorf("%s is not canonical (%s)", n, c)
		}
	}
}

type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
	Limit            *int64   `json:"limit"`
	RetryAfter       *int64   `json:"retry_after"`
}

func decodeProblem(t *testing.T, w interface {
	Header() http.Header
}, body string) problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p problem
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return p
}

func ptr(v int64) *int64 { return &v }

// TestProblemBody checks the 429 body: the draft's quota-exceeded type,
// the violated policies, the limit and the retry time; and the "never"
// variant.
func TestProblemBody(t *testing.T) {
	clk := &clock{now: t0}
	c := newChecker(mustPolicy(t, testPolicy), memoryStore(t), clk)
	h := httplimit.New(c, httplimit.Options{Timeout: testTimeout, Path: apiPath, Cost: costHeader}).Wrap(okHandler)
	for i := 0; i < 3; i++ {
		do(h, "GET", "/trade", nil, "")
	}
	w := do(h, "GET", "/trade", nil, "")
	got := decodeProblem(t, w, w.Body.String())
	want := problem{
		Type:             "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           429,
		Detail:           "Quota exceeded: retry in 10 seconds.",
		ViolatedPolicies: []string{"api/*"},
		Limit:            ptr(3),
		RetryAfter:       ptr(10),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
		t.Errorf("Content-Length %s for %d bytes", w.Header().Get("Content-Length"), w.Body.Len())
	}

	// Cost 5 does not fit what is left of the fixed window (2 of 5), and
	// never fits the token bucket (4) nor the gcra (3): the longest wait,
	// never, is first the gcra's.
	w = do(h, "GET", "/trade", map[string]string{"X-Cost": "5"}, "")
	got = decodeProblem(t, w, w.Body.String())
	want = problem{
		Type:             httplimit.QuotaExceededType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           429,
		Detail:           "The request exceeds the limit of api/* and can never be admitted.",
		ViolatedPolicies: []string{"api/*", "api/*/trade#0", "api/*/trade#1"},
		Limit:            ptr(3),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("never: got  %+v\nwant %+v", got, want)
	}
	if v := w.Header().Values("Retry-After"); v != nil {
		t.Errorf("never: Retry-After %q", v)
	}
}

// TestUnmatched: a path with no levels passes without headers; with
// unmatched: deny it is 403, not 429.
func TestUnmatched(t *testing.T) {
	for _, deny := range []bool{false, true} {
		yaml := testPolicy
		if deny {
			yaml = "unmatched: deny\n" + yaml
		}
		c := newChecker(mustPolicy(t, yaml), memoryStore(t), nil)
		h := httplimit.New(c, httplimit.Options{Timeout: testTimeout}).Wrap(okHandler) // path [ip]: matches nothing
		w := do(h, "GET", "/", nil, "")
		for _, k := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Values(k); v != nil {
				t.Errorf("deny=%v: %s: %q", deny, k, v)
			}
		}
		if !deny {
			if w.Code != 200 {
				t.Errorf("allow: status %d", w.Code)
			}
			continue
		}
		if w.Code != 403 {
			t.Fatalf("deny: status %d", w.Code)
		}
		p := decodeProblem(t, w, w.Body.String())
		if p.Type != "about:blank" || p.Status != 403 || p.Title != "Forbidden" {
			t.Errorf("deny: %+v", p)
		}
	}
}

// TestOnDecisionSeesShadow: the shadow level's denial is not enforced and
// not advertised, but OnDecision sees it.
func TestOnDecisionSeesShadow(t *testing.T) {
	clk := &clock{now: t0}
	c := newChecker(mustPolicy(t, testPolicy), memoryStore(t), clk)
	var seen []policy.Level
	h := httplimit.New(c, httplimit.Options{
		Timeout: testTimeout,
		Path:    apiPath,
		OnDecision: func(r *http.Request, d *policy.Decision) {
			seen = append(seen[:0], d.Levels...)
		},
	}).Wrap(okHandler)
	do(h, "GET", "/report", nil, "")
	w := do(h, "GET", "/report", nil, "")
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if len(seen) != 2 || !seen[1].Shadow || seen[1].Result.Allowed {
		t.Fatalf("levels %+v, want the shadow gate denying", seen)
	}
	if got := w.Header().Get("RateLimit"); got != `"api/*";r=1;t=20` {
		t.Errorf("RateLimit %q", got)
	}
}

// TestBadRequestNeverFailsOpen: a key the store refuses (too long) is the
// request's fault: 400, not a store failure served by fail-open; and a
// Header key cannot get that long.
func TestBadRequestNeverFailsOpen(t *testing.T) {
	c := newChecker(mustPolicy(t, testPolicy), memoryStore(t), nil)
	unbounded := httplimit.New(c, httplimit.Options{
		Timeout: testTimeout,
		Key:     func(r *http.Request) (string, error) { return r.Header.Get("X-Long"), nil },
		Path:    apiPath,
	})
	w := do(unbounded.Wrap(okHandler), "GET", "/trade", map[string]string{"X-Long": strings.Repeat("k", 600)}, "")
	if w.Code != 400 {
		t.Fatalf("status %d, want 400", w.Code)
	}
	if p := decodeProblem(t, w, w.Body.String()); p.Detail != "The request cannot be rate limited." {
		t.Errorf("detail %q", p.Detail)
	}
	if n := unbounded.StoreErrors(); n != 0 {
		t.Errorf("StoreErrors %d, want 0", n)
	}

	l := httplimit.New(c, httplimit.Options{
		Timeout: testTimeout,
		Key:     httplimit.Header("X-API-Key", nil),
		Path:    apiPath,
	})
	h := l.Wrap(okHandler)
	w = do(h, "GET", "/trade", nil, "")
	if w.Code != 400 {
		t.Fatalf("no key: status %d, want 400", w.Code)
	}
	if p := decodeProblem(t, w, w.Body.String()); p.Detail != "httplimit: no key for the request: no header X-Api-Key" {
		t.Errorf("detail %q", p.Detail)
	}
	w = do(h, "GET", "/trade", map[string]string{"X-API-Key": strings.Repeat("k", httplimit.MaxHeaderKeyLen+1)}, "")
	if w.Code != 400 {
		t.Fatalf("long key: status %d, want 400", w.Code)
	}
	w = do(h, "GET", "/trade", map[string]string{"X-API-Key": "a"}, "")
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if n := l.StoreErrors(); n != 0 {
		t.Errorf("StoreErrors %d, want 0", n)
	}
}

// TestHeaderKeyFallback: without the header, the fallback keys the request.
func TestHeaderKeyFallback(t *testing.T) {
	key := httplimit.Header("x-api-key", httplimit.IPKey{}.Key)
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.1:1"
	if k, err := key(r); err != nil || k != "198.51.100.1" {
		t.Errorf("fallback: %q, %v", k, err)
	}
	r.Header.Set("X-Api-Key", "secret")
	if k, err := key(r); err != nil || k != "secret" {
		t.Errorf("header: %q, %v", k, err)
	}
	r.Header.Set("X-Api-Key", "")
	if k, err := key(r); err != nil || k != "198.51.100.1" {
		t.Errorf("empty header: %q, %v", k, err)
	}
	_, err := httplimit.Header("X-API-Key", nil)(r)
	if !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("no fallback: %v", err)
	}
}

// TestWindows checks q and w for every algorithm, and for a limit
// defined outside package algo, which answers Quota for itself, through a
// stub checker.
func TestWindows(t *testing.T) {
	for _, tc := range []struct {
		limit algo.Limit
		quota int64
		want  string
	}{
		{build(t, algo.Spec{Algorithm: "gcra", Burst: 15, Count: 30, Period: time.Minute}), 16, `"p";q=16;w=32`},
		{build(t, algo.Spec{Algorithm: "gcra", Burst: 5, Count: 10, Period: time.Second}), 6, `"p";q=6;w=1`},
		{build(t, algo.Spec{Algorithm: "gcra", Burst: 0, Count: 1, Period: 90 * time.Second}), 1, `"p";q=1;w=90`},
		{build(t, algo.Spec{Algorithm: "token_bucket", Burst: 10, Rate: 10, Per: time.Minute}), 10, `"p";q=10;w=60`},
		{build(t, algo.Spec{Algorithm: "token_bucket", Burst: 1, Rate: 3, Per: time.Second}), 1, `"p";q=1;w=1`},
		{build(t, algo.Spec{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}), 1000, `"p";q=1000;w=3600`},
		{build(t, algo.Spec{Algorithm: "fixed_window", Limit: 7, Window: 1500 * time.Millisecond}), 7, `"p";q=7;w=2`},
		{build(t, algo.Spec{Algorithm: "gate", Interval: 10 * time.Second}), 1, `"p";q=1;w=10`},
		{build(t, algo.Spec{Algorithm: "sliding_log", Limits: algo.WindowSpecs{{Limit: 10, Window: time.Second}, {Limit: 100, Window: time.Minute}}}), 10, `"p";q=10;w=1`},
		{build(t, algo.Spec{Algorithm: "window_counter", Limits: algo.WindowSpecs{{Limit: 1000, Window: time.Hour}, {Limit: 100, Window: time.Minute}}}), 100, `"p";q=100;w=60`},
		{build(t, algo.Spec{Algorithm: "sliding_log", MinGap: 5 * time.Second, Limits: algo.WindowSpecs{{Limit: 1, Window: 5 * time.Second}}}), 1, `"p";q=1;w=5`},
		// A limit from outside package algo, and a level with no limit
		// (a user script's).
		{futureLimit{algo.FixedWindow{Count: 7, Window: 30 * time.Second}}, 7, `"p";q=7;w=30`},
		{nil, 42, `"p";q=42`},
	} {
		st := stubChecker{d: policy.Decision{Allowed: true, Matched: true, Levels: []policy.Level{{
			Pattern: "p", Key: "k", Limit: tc.limit,
			Result: algo.Result{Allowed: true, Quota: tc.quota, Remaining: tc.quota},
		}}}}
		w := do(httplimit.New(st, httplimit.Options{Timeout: testTimeout}).Wrap(okHandler), "GET", "/", nil, "")
		if got := w.Header().Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%+v: got %s, want %s", tc.limit, got, tc.want)
		}
	}
}

// futureLimit is an algorithm defined outside package algo.
type futureLimit struct{ algo.FixedWindow }

func build(t *testing.T, s algo.Spec) algo.Limit {
	t.Helper()
	l, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stubChecker answers every check with a copy of d.
type stubChecker struct {
	d   policy.Decision
	err error
}

func (s stubChecker) Decide(_ context.Context, _ *policy.Query, d *policy.Decision) error {
	if s.err != nil {
		return s.err
	}
	lv := append(d.Levels[:0], s.d.Levels...)
	*d = s.d
	d.Levels = lv
	return nil
}

// TestConcurrent: many goroutines through one Middleware admit exactly the
// limit, and every response carries consistent headers.
func TestConcurrent(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := newChecker(mustPolicy(t, `
schema:
  c:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 100, window: 1h}
`), open(t), nil)
			h := httplimit.New(c, httplimit.Options{
				Key:  httplimit.Header("X-API-Key", nil),
				Path: func(r *http.Request, key string, p []string) []string { return append(p, "c", key) },
				// This test counts decisions; a loaded CI machine under -race
				// must not turn slow ones into fail-open passes.
				Timeout: 10 * time.Second,
			}).Wrap(okHandler)
			var wg sync.WaitGroup
			var allowed, denied atomic.Int64
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						w := do(h, "GET", "/", map[string]string{"X-API-Key": "k"}, "")
						rl := w.Header().Get("RateLimit")
						switch {
						case w.Code == 200 && strings.HasPrefix(rl, `"c/*";r=`):
							allowed.Add(1)
						case w.Code == 429 && strings.HasPrefix(rl, `"c/*";r=0;t=`) && w.Header().Get("Retry-After") != "":
							denied.Add(1)
						default:
							t.Errorf("%d %v", w.Code, w.Header())
						}
					}
				}()
			}
			wg.Wait()
			if allowed.Load() != 100 || denied.Load() != 220 {
				t.Errorf("allowed %d, denied %d; want 100 and 220", allowed.Load(), denied.Load())
			}
		})
	}
}
