package server

import (
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
		{"forward_auth:\n  routes:\n    - match: /api/{id}/x\n      path: [a, \"{tenant}\"]\n", `forward_auth.routes[0]: path[1]: "{tenant}" is none of {client_ip}, {method}, {host}, {header:Name} and the match's wildcards`},
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
// patterns, wildcards, methods, a header that must be present, and the
// path cleaned first.
func TestForwardAuthRoutes(t *testing.T) {
	fa, err := newForwardAuth(ForwardAuthConfig{Routes: []ForwardRoute{
		{Match: "/login", Methods: []string{"post"}, Path: []string{"login"}},
		{Match: "/api/{tenant}/", Path: []string{"t", "{tenant}", "{header:x-api-key}"}},
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
		segs, err := cleanPath(tc.uri, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.uri, err)
		}
		h := map[string][]string{}
		if tc.key != "" {
			h["X-Api-Key"] = []string{tc.key}
		}
		rt := fa.match(tc.method, segs, h)
		if rt == nil {
			t.Errorf("%s %s: no route, want %s", tc.method, tc.uri, tc.want)
			continue
		}
		var got []string
		for _, s := range rt.paths[0] {
			switch s.kind {
			case segLiteral:
				got = append(got, s.text)
			case segWildcard:
				got = append(got, segs[s.at])
			case segHeader:
				got = append(got, h[s.text][0])
			case segMethod:
				got = append(got, tc.method)
			case segHost:
				got = append(got, "h")
			}
		}
		if strings.Join(got, "/") != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.uri, strings.Join(got, "/"), tc.want)
		}
	}
}
