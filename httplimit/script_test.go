package httplimit_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redis"
)

var legacyNames = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

func loadScript(t *testing.T, st *redis.Store, file string) *redis.UserScript {
	t.Helper()
	s, err := st.LoadScript(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scriptFile writes a Lua script to a temporary file.
func scriptFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func keyed(key string) map[string]string { return map[string]string{"X-API-Key": key} }

func scriptOptions() httplimit.Options {
	return httplimit.Options{
		Timeout: testTimeout,
		Key:     httplimit.Header("X-API-Key", nil),
		Path:    apiKeyPath,
		Cost:    costHeader,
		Logger:  discard,
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not an integer", s)
	}
	return n
}

// TestScriptFixedWindow runs examples/window_from_first.lua: 3 per 60 s.
func TestScriptFixedWindow(t *testing.T) {
	srv := redistest.Start(t)
	s := loadScript(t, redisStore(t, srv), "../store/redis/examples/window_from_first.lua")
	h := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames, Args: []string{"3", "60", httplimit.CostArg}}, scriptOptions()).Wrap(okHandler)

	for i := 0; i < 3; i++ {
		w := do(h, "GET", "/", keyed("alex"), "")
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
		hd := w.Header()
		if hd.Get("X-RateLimit-Limit") != "3" || hd.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("request %d: %v", i, hd)
		}
		if r := atoi(t, hd.Get("X-RateLimit-Reset")); r < 30 || r > 60 { // generous: no timing flakes
			t.Errorf("request %d: reset %d", i, r)
		}
		if hd.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on an allowed request", i)
		}
	}
	w := do(h, "GET", "/", keyed("alex"), "")
	if w.Code != 429 {
		t.Fatalf("4th: %d", w.Code)
	}
	ra := atoi(t, w.Header().Get("Retry-After"))
	if ra < 30 || ra > 60 || w.Header().Get("X-RateLimit-Remaining") != "0" || w.Header().Get("X-RateLimit-Reset") != strconv.Itoa(ra) {
		t.Errorf("4th: %v", w.Header())
	}
	p := decodeProblem(t, w, w.Body.String())
	if p.Type != httplimit.QuotaExceededType || p.RetryAfter == nil || *p.RetryAfter != int64(ra) ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "window_from_first.lua" || p.Limit != nil {
		t.Errorf("4th: problem %+v", p)
	}

	// Another key has its own window, and its key is the contract's.
	if w := do(h, "GET", "/", keyed("b:{x}"), ""); w.Code != 200 {
		t.Fatalf("other key: %d", w.Code)
	}
	for _, k := range []string{"sluice:lua:api:alex", "sluice:lua:api:b%3A%7Bx%7D"} {
		if n, err := srv.Do("EXISTS", k); err != nil || n != "1" {
			t.Errorf("EXISTS %s: %q %v", k, n, err)
		}
	}

	// A cost above the limit: denied, with no Retry-After.
	w = do(h, "GET", "/", map[string]string{"X-API-Key": "carol", "X-Cost": "4"}, "")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("cost 4: %d %v", w.Code, w.Header())
	}
	if p := decodeProblem(t, w, w.Body.String()); p.Detail != "Quota exceeded." || p.RetryAfter != nil {
		t.Errorf("cost 4: %+v", p)
	}
	// Cost 2 fits: remaining 1.
	w = do(h, "GET", "/", map[string]string{"X-API-Key": "carol", "X-Cost": "2"}, "")
	if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("cost 2: %d %v", w.Code, w.Header())
	}
}

// TestScriptTokenBucket runs examples/token_bucket.lua: 3 tokens, 1 per 60 s.
func TestScriptTokenBucket(t *testing.T) {
	srv := redistest.Start(t)
	s := loadScript(t, redisStore(t, srv), "../store/redis/examples/token_bucket.lua")
	h := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames, Args: []string{"3", "1", "60"}, Prefix: "tb:"}, scriptOptions()).Wrap(okHandler)
	for i := 0; i < 3; i++ {
		w := do(h, "GET", "/", keyed("alex"), "")
		if w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		hd := w.Header()
		if hd.Get("X-RateLimit-Limit") != "3" || hd.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("request %d: %v", i, hd)
		}
		if r, want := atoi(t, hd.Get("X-RateLimit-Reset")), 60*(i+1); r < want-30 || r > want {
			t.Errorf("request %d: reset %d, want about %d", i, r, want)
		}
	}
	w := do(h, "GET", "/", keyed("alex"), "")
	if w.Code != 429 {
		t.Fatalf("4th: %d", w.Code)
	}
	if ra := atoi(t, w.Header().Get("Retry-After")); ra < 30 || ra > 60 {
		t.Errorf("4th: Retry-After %d", ra)
	}
	if n, err := srv.Do("EXISTS", "tb:api:alex"); err != nil || n != "1" {
		t.Errorf("EXISTS: %q %v", n, err)
	}
	withCost := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames, Args: []string{"3", "1", "60", "$cost"}, Prefix: "tb:"}, scriptOptions()).Wrap(okHandler)
	w = do(withCost, "GET", "/", map[string]string{"X-API-Key": "bob", "X-Cost": "4"}, "")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" || w.Header().Get("X-RateLimit-Remaining") != "3" {
		t.Errorf("cost 4: %d %v", w.Code, w.Header())
	}
	w = do(withCost, "GET", "/", map[string]string{"X-API-Key": "carol", "X-Cost": "3"}, "")
	if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("cost 3: %d %v", w.Code, w.Header())
	}
	// Without "$cost" in the arguments, the cost header does not reach the
	// script: the request costs the script's default, 1.
	w = do(h, "GET", "/", map[string]string{"X-API-Key": "bob", "X-Cost": "2"}, "")
	if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("default cost: %d %v", w.Code, w.Header())
	}
}

// TestScriptNoScript: after SCRIPT FLUSH (as after a Redis restart), EVALSHA
// answers NOSCRIPT and the script is sent again.
func TestScriptNoScript(t *testing.T) {
	srv := redistest.Start(t)
	c := redisStore(t, srv)
	s := loadScript(t, c, "../store/redis/examples/window_from_first.lua")
	h := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames, Args: []string{"5", "60"}}, scriptOptions()).Wrap(okHandler)
	if w := do(h, "GET", "/", keyed("a"), ""); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if w := do(h, "GET", "/", keyed("a"), ""); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "3" {
		t.Fatalf("after SCRIPT FLUSH: %d %v", w.Code, w.Header())
	}
}

// TestScriptReplies checks the reply contract: each breach is a clear
// error of its kind, handled by the failure policy; valid replies set the
// lined-up headers and the pairs.
func TestScriptReplies(t *testing.T) {
	srv := redistest.Start(t)
	c := redisStore(t, srv)
	for _, tc := range []struct {
		name, src string
		kind      error  // nil: valid
		where     string // in the error
	}{
		{"not an array", `return 1`, httplimit.ErrReplyShape, "reply"},
		{"nil", `return nil`, httplimit.ErrReplyShape, "reply"},
		{"one element", `return {"allow"}`, httplimit.ErrReplyShape, "reply"},
		{"three elements", `return {"allow", {1, 2, 3}, 4}`, httplimit.ErrReplyShape, "reply"},
		{"bad verdict", `return {"maybe", {1, 2, 3}}`, httplimit.ErrReplyVerdict, "reply[1]"},
		{"verdict case", `return {"Allow", {1, 2, 3}}`, httplimit.ErrReplyVerdict, "reply[1]"},
		{"integer verdict", `return {1, {1, 2, 3}}`, httplimit.ErrReplyVerdict, "reply[1]"},
		{"items not an array", `return {"allow", "1,2,3"}`, httplimit.ErrReplyValues, "reply[2]"},
		{"too few values", `return {"allow", {1, 2}}`, httplimit.ErrReplyValues, "reply[2]"},
		{"too many values", `return {"allow", {1, 2, 3, 4}}`, httplimit.ErrReplyValues, "reply[2][4]"},
		{"pair of one", `return {"allow", {1, 2, 3, {"X-A"}}}`, httplimit.ErrReplyHeader, "reply[2][4]"},
		{"pair name not a token", `return {"allow", {1, 2, 3, {"X A", "v"}}}`, httplimit.ErrReplyHeader, "reply[2][4][1]"},
		{"pair name integer", `return {"allow", {1, 2, 3, {7, "v"}}}`, httplimit.ErrReplyHeader, "reply[2][4][1]"},
		{"framing header", `return {"allow", {1, 2, 3, {"content-length", "5"}}}`, httplimit.ErrReplyHeader, "reply[2][4][1]"},
		{"value with newline", `return {"deny", {1, 2, "3\r\nX-Evil: 1"}}`, httplimit.ErrReplyHeader, "reply[2][3]"},
		{"pair value nested", `return {"allow", {1, 2, 3, {"X-A", {1}}}}`, httplimit.ErrReplyHeader, "reply[2][4][2]"},
		{"value false (nil)", `return {"allow", {1, false, 3}}`, httplimit.ErrReplyHeader, "reply[2][2]"},
		{"valid", `return {"deny", {{"X-Custom", "hi"}, 1, "", 3, {"retry-after", 7}}}`, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadScript(t, c, scriptFile(t, "s.lua", tc.src))
			v, err := s.Run(context.Background(), []string{"k"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			allow, headers, err := httplimit.ParseReply(s.Name(), legacyNames, v)
			if tc.kind == nil {
				if err != nil {
					t.Fatal(err)
				}
				want := [][2]string{{"X-Ratelimit-Limit", "1"}, {"X-Ratelimit-Reset", "3"}, {"X-Custom", "hi"}, {"Retry-After", "7"}}
				if allow || !slices.Equal(headers, want) {
					t.Fatalf("reply %v %q, want deny %q", allow, headers, want)
				}
				return
			}
			if !errors.Is(err, httplimit.ErrBadReply) || !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want ErrBadReply and %v", err, tc.kind)
			}
			if !strings.HasPrefix(err.Error(), "userscript: s.lua: ") || !strings.Contains(err.Error(), ": "+tc.where+": "+tc.kind.Error()+": ") {
				t.Errorf("err = %v, want it to name s.lua and %s", err, tc.where)
			}
			t.Log(err)
		})
	}

	// Through the middleware: a breach is a store failure.
	s := loadScript(t, c, scriptFile(t, "breach.lua", `return {"allow", {1, 2}}`))
	for _, f := range []httplimit.FailurePolicy{httplimit.FailOpen, httplimit.FailClosed} {
		opts := scriptOptions()
		opts.Failure = f
		var seen error
		opts.OnStoreError = func(r *http.Request, err error) { seen = err }
		l := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames}, opts)
		w := do(l.Wrap(okHandler), "GET", "/", keyed("a"), "")
		want := map[httplimit.FailurePolicy]int{httplimit.FailOpen: 200, httplimit.FailClosed: 503}[f]
		if w.Code != want || l.StoreErrors() != 1 || !errors.Is(seen, httplimit.ErrReplyValues) {
			t.Errorf("policy %d: status %d, StoreErrors %d, error %v", f, w.Code, l.StoreErrors(), seen)
		}
	}

	// A runtime error in the script is a store failure naming the script.
	s = loadScript(t, c, scriptFile(t, "runtime.lua", `return redis.call("NO-SUCH-COMMAND")`))
	if _, err := s.Run(context.Background(), []string{"k"}, nil); err == nil || !strings.Contains(err.Error(), "runtime.lua") {
		t.Errorf("runtime error: %v", err)
	}

	// A valid deny through the middleware: the script's headers, 429, and
	// the problem's retry time from the script's Retry-After.
	s = loadScript(t, c, scriptFile(t, "deny.lua", `return {"deny", {{"X-Custom", "hi"}, 1, "", 3, {"Retry-After", 7}}}`))
	w := do(httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames}, scriptOptions()).Wrap(okHandler), "GET", "/", keyed("a"), "")
	if w.Code != 429 || w.Header().Get("Retry-After") != "7" || w.Header().Get("X-Custom") != "hi" ||
		w.Header().Get("X-RateLimit-Limit") != "1" || w.Header().Values("X-RateLimit-Remaining") != nil {
		t.Errorf("deny: %d %v", w.Code, w.Header())
	}
	if p := decodeProblem(t, w, w.Body.String()); p.RetryAfter == nil || *p.RetryAfter != 7 || p.Detail != "Quota exceeded: retry in 7 seconds." {
		t.Errorf("deny: %+v", p)
	}
}

// TestScriptArgs: ARGV are the configured options, "$cost" the request's
// cost; KEYS[1] the prefixed key.
func TestScriptArgs(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisStore(t, srv).LoadScript(context.Background(),
		scriptFile(t, "echo.lua", `return {"allow", {KEYS[1], table.concat(ARGV, " ")}}`))
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: []string{"X-Key", "X-Args"}, Args: []string{"a", httplimit.CostArg, "b c", "$cost"}}, scriptOptions()).Wrap(okHandler)
	w := do(h, "GET", "/", map[string]string{"X-API-Key": "alex", "X-Cost": "5"}, "")
	if w.Header().Get("X-Key") != "sluice:lua:api:alex" || w.Header().Get("X-Args") != "a 5 b c 5" {
		t.Errorf("%v", w.Header())
	}
	w = do(h, "GET", "/", map[string]string{"X-API-Key": "alex", "X-Cost": "-1"}, "")
	if w.Code != 400 {
		t.Errorf("negative cost: %d", w.Code)
	}
}

// TestLoadScriptCluster: on Redis Cluster the script is loaded into every
// node, and runs wherever its key lives.
func TestLoadScriptCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	c := redistest.Client(t, cl.URL())
	const file = "../store/redis/examples/window_from_first.lua"
	s := loadScript(t, redisStoreAt(t, cl.URL()), file)
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	nodes := c.Nodes()
	if len(nodes) != len(cl.Nodes) {
		t.Fatalf("the client knows %d nodes, want %d", len(nodes), len(cl.Nodes))
	}
	for addr, n := range nodes {
		got, err := n.Do(context.Background(), n.B().ScriptExists().Sha1(sha).Build()).AsIntSlice()
		if err != nil || len(got) != 1 || got[0] != 1 {
			t.Errorf("node %s: SCRIPT EXISTS: %v %v", addr, got, err)
		}
	}
	h := httplimit.NewScript(s, httplimit.ScriptConfig{Headers: legacyNames, Args: []string{"1", "60"}}, scriptOptions()).Wrap(okHandler)
	for i := 0; i < 20; i++ { // keys spread over the slots of every node
		key := "user" + strconv.Itoa(i)
		if w := do(h, "GET", "/", keyed(key), ""); w.Code != 200 {
			t.Fatalf("%s: %d", key, w.Code)
		}
		if w := do(h, "GET", "/", keyed(key), ""); w.Code != 429 {
			t.Fatalf("%s again: %d", key, w.Code)
		}
	}
}

// TestScriptHeaderNames: a header name a script may not set is refused
// when the limiter is made (NewScript panics, as for a bad prefix).
func TestScriptHeaderNames(t *testing.T) {
	s := loadScript(t, redisStore(t, redistest.Start(t)), scriptFile(t, "ok.lua", `return {"allow", {}}`))
	for _, names := range [][]string{{"X-Ok", "bad name"}, {""}, {"Content-Length"}, {"X-Ok\r\n"}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "ok.lua") {
					t.Errorf("header names %q: %v", names, r)
				}
			}()
			httplimit.NewScript(s, httplimit.ScriptConfig{Headers: names}, scriptOptions())
		}()
	}
	httplimit.NewScript(s, httplimit.ScriptConfig{}, scriptOptions()) // no header names
}
