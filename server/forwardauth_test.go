package server

import (
	"github.com/sluicehq/sluice/answer"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestForwardAuthConfigErrors: each mistake in forward_auth is reported
// with the file, line and field, in the one format of every config.
func TestForwardAuthConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"forward_auth:\n  routes:\n    - match: login\n      path: [a]\n", "sluice.yaml:3:7: forward_auth.routes[0]: match must be a path that starts with /"},
		{"forward_auth:\n  routes:\n    - match: /api/{id}/x\n      path: [a, \"{tenant}\"]\n", `forward_auth.routes[0]: path[1]: "{tenant}" is none of {client_ip}, {method}, {host}, {header:Name}, {query:name}, {cookie:name} and the match's wildcards`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [\"{query:a&b}\"]\n", `path[0]: "{query:a&b}": want {query:name}`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [\"{query:}\"]\n", `path[0]: "{query:}": want {query:name}`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [\"{cookie:a;b}\"]\n", `path[0]: "{cookie:a;b}": want {cookie:name}`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [\"{header:X}\"]\n      missing: allow\n", "sluice.yaml:3:7: forward_auth.routes[0]: missing must be deny or next, got \"allow\""},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [a, \"{client_ip}\"]\n      missing: next\n", "missing: next: the route keys by no header, query parameter or cookie, which alone may be missing"},
		{"forward_auth:\n  unmatched: skip\n  routes:\n    - match: /\n      path: [a]\n", "sluice.yaml:2:3: forward_auth: unmatched must be allow or deny, got \"skip\""},
		{"forward_auth:\n  routes:\n    - match: /a/{x}-{y}\n      path: [a]\n", `a wildcard is {name} with a name of letters, digits and _, got "{x}-{y}"`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [\"user-{client_ip}\"]\n", `path[0]: a placeholder fills a whole segment, got "user-{client_ip}"`},
		{"forward_auth:\n  routes:\n    - match: /a\n", "path: a route needs a policy path of at least one segment"},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [a]\n      paths: [[b]]\n", "path and paths: give one policy path, or several in paths, not both"},
		{"forward_auth:\n  routes:\n    - match: /a\n      paths: [[a], [\"{nope}\"]]\n", `paths[1][0]: "{nope}" is none of`},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [a]\n      cost: -1\n", "cost must not be negative, got -1"},
		{"forward_auth:\n  nginx_deny_status: 429\n  routes:\n    - match: /\n      path: [a]\n", "sluice.yaml:2:3: forward_auth: nginx_deny_status must be 401 or 403 (nginx answers 500 for any other), got 429"},
		{"forward_auth:\n  trusted_proxies: [10.0.0.300/8]\n", "sluice.yaml:2:21: forward_auth.trusted_proxies[0]:"},
		{"forward_auth:\n  client_ip_header: X-Real-IP\n", "client_ip_header must be X-Forwarded-For or Forwarded"},
		{"forward_auth:\n  routes:\n    - match: /a\n      path: [a]\n      methods: [\"GET POST\"]\n", `methods: "GET POST" is not a method`},
	} {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var c Config
		err := LoadConfigFile(path, &c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}

// TestForwardAuthRoutes matches paths against routes: exact and prefix
// patterns, wildcards, methods, a header whose absence passes to the next
// route (missing: next), and the path cleaned first.
func TestForwardAuthRoutes(t *testing.T) {
	fa, err := newForwardAuth(ForwardAuthConfig{Routes: []ForwardRoute{
		{Match: "/login", Methods: []string{"post"}, Path: []string{"login"}},
		{Match: "/api/{tenant}/", Path: []string{"t", "{tenant}", "{header:x-api-key}"}, Missing: "next"},
		{Match: "/api/{tenant}/", Path: []string{"t", "{tenant}", "{method}"}},
		{Match: "/", Path: []string{"all", "{host}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, uri, key, want string
	}{
		{"POST", "/login", "", "login"},
		{"GET", "/login", "", "all/h"},
		{"POST", "/login/x", "", "all/h"},
		{"POST", "//static/./../login?x=1", "", "login"},
		{"POST", "/%6cogin", "", "login"},
		{"GET", "/api/acme/orders", "k1", "t/acme/k1"},
		{"GET", "/api/acme/orders", "", "t/acme/GET"},
		{"GET", "/api/acme", "", "t/acme/GET"},
		{"GET", "/api", "", "all/h"},
		{"GET", "http://h/api/a%2Fb/x", "", "t/a/GET"},
		// Any case of a literal, and a segment's parameters dropped: every
		// spelling an app may route to its login counts as the login.
		{"POST", "/LOGIN", "", "login"},
		{"POST", "/login;jsessionid=x", "", "login"},
		{"POST", "/Login;a=b/", "", "login"},
		{"POST", "/login%3Bx", "", "all/h"}, // an escaped ; is the segment's own
		{"GET", "/API;v=1/Acme;x=1/orders", "", "t/Acme/GET"},
	} {
		h := http.Header{}
		if tc.key != "" {
			h["X-Api-Key"] = []string{tc.key}
		}
		got, fe := readRoute(t, fa, tc.method, tc.uri, h)
		if fe != nil || got != tc.want {
			t.Errorf("%s %s: %q %v, want %s", tc.method, tc.uri, got, fe, tc.want)
		}
	}
}

// readRoute asks fa for the route of a proxied request with the host "h",
// and returns its policy paths joined ("/" within a path, " + " between
// paths; "" for none) or its refusal.
func readRoute(t *testing.T, fa *forwardAuth, method, uri string, h http.Header) (string, *forwardError) {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/forward-auth", nil)
	r.Header = h // from 192.0.2.1
	c := new(answer.Call)
	rt, fe := fa.read(r, method, uri, "h", c)
	var s []string
	for i := range c.Query.Paths {
		if rt != nil && fe == nil {
			s = append(s, strings.Join(c.Query.Paths[i].Path, "/"))
		}
	}
	return strings.Join(s, " + "), fe
}

// TestForwardAuthKeyParts: a route keys by a header, a query parameter or
// a cookie; one it lacks (absent or empty) is refused under missing: deny
// (the default) and passes to the next route under missing: next; a part
// sent twice, or past the bound of a key, is refused as a bad request;
// under unmatched: deny a request no route decides is refused.
func TestForwardAuthKeyParts(t *testing.T) {
	fa, err := newForwardAuth(ForwardAuthConfig{Unmatched: "deny", Routes: []ForwardRoute{
		{Match: "/q", Path: []string{"q", "{query:api_key}"}},
		{Match: "/c", Path: []string{"c", "{cookie:sid}"}},
		{Match: "/both", Paths: [][]string{{"ip", "{client_ip}"}, {"k", "{header:X-Api-Key}"}}, Missing: "next"},
		{Match: "/both", Path: []string{"k", "{query:key}"}, Missing: "next"},
		{Match: "/both", Path: []string{"anon", "{client_ip}"}},
		{Match: "/h", Path: []string{"h", "{header:X-Api-Key}"}, Missing: "deny"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uri    string
		h      http.Header
		want   string
		status int // of the refusal; 0 for none
	}{
		{"/q?api_key=k1", nil, "q/k1", 0},
		{"/q?api%5Fkey=k+1", nil, "q/k 1", 0},          // the name decoded too
		{"/q?a=1&api_key=k%2F1#frag", nil, "q/k/1", 0}, // the value decoded: a segment of its own
		{"/q?api_key=", nil, "", 403},
		{"/q?api=k1", nil, "", 403},
		{"/q", nil, "", 403},
		{"/q?api_key=a&api%5Fkey=b", nil, "", 400},
		{"/q?api_key=%zz", nil, "", 400},
		{"/q?api_key=" + strings.Repeat("k", 257), nil, "", 400},
		{"/c", http.Header{"Cookie": {"a=1; sid=s1"}}, "c/s1", 0},
		{"/c", http.Header{"Cookie": {"sid="}}, "", 403},
		{"/c", http.Header{"Cookie": {"other=1"}}, "", 403},
		{"/c", http.Header{"Cookie": {"sid=a; sid=b"}}, "", 400},
		{"/c", http.Header{"Cookie": {"sid=" + strings.Repeat("s", 257)}}, "", 431},
		{"/both", http.Header{"X-Api-Key": {"k1"}}, "ip/192.0.2.1 + k/k1", 0},
		{"/both?key=k2", nil, "k/k2", 0},
		{"/both?key=k2", http.Header{"X-Api-Key": {""}}, "k/k2", 0},
		{"/both", nil, "anon/192.0.2.1", 0},
		{"/h", http.Header{"X-Api-Key": {"a", "b"}}, "", 400},
		{"/h", http.Header{}, "", 403},
		{"/nowhere", nil, "", 403},
	} {
		if tc.h == nil {
			tc.h = http.Header{}
		}
		got, fe := readRoute(t, fa, "GET", tc.uri, tc.h)
		status := 0
		if fe != nil {
			status = fe.status
		}
		if got != tc.want || status != tc.status {
			t.Errorf("%s %v: %q %+v, want %q, refused %d", tc.uri, tc.h, got, fe, tc.want, tc.status)
		}
	}
}
