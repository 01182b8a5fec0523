package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server"
)

// sluice runs the command in-process and returns its exit status and output.
func runSluice(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(context.Background(), env{strings.NewReader(""), &out, &errOut}, args)
	return status, out.String(), errOut.String()
}

// writeFile writes a file in a temporary directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const seedLimits = `schema:
  user:
    children:
      "*":                 # any user id not matched by name
        limits: [15, 30, 60]   # GCRA: max_burst 15, 30 per 60 s (the CL.THROTTLE arguments)
        children:
          trade:
            limits: [5, 10, 15]
`

func TestValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", seedLimits)
	status, out, errOut := runSluice(t, "validate", good)
	if want := good + ": ok: 3 nodes, 2 with limits (2 limits, 0 shadow), 0 unlimited; unmatched requests are allowed\n"; status != 0 || out != want || errOut != "" {
		t.Errorf("good: status %d\nstdout %q\nwant   %q\nstderr %q", status, out, want, errOut)
	}

	bad := writeFile(t, "bad.yaml", `unmatched: never
schema:
  user:
    children:
      "*":
        limits: [15, 30]
        children:
          trade:
            limits: [{algorithm: gcra, burst: 5, count: -10, period: 1s}]
            colour: red
          trade: {unlimited: true}
`)
	status, out, errOut = runSluice(t, "validate", bad, good)
	want := strings.Join([]string{
		bad + `:1:12: unmatched: want allow or deny, got "never"`,
		bad + `:6:17: schema.user.children.*.limits: a [burst, count, period] shorthand has 3 values, got 2`,
		bad + `:9:57: schema.user.children.*.children.trade.limits[0].count: gcra count must be positive, got -10`,
		bad + `:10:13: schema.user.children.*.children.trade.colour: unknown field "colour" (want limits, children, unlimited, shadow, quota_mode, name, replaces, shared_counter, lease, global, delay, request_limit, debt, escalate, allow or deny)`,
		bad + `:11:11: schema.user.children.*.children.trade: duplicate child "trade" (first at line 8)`,
		bad + `: 5 errors`,
	}, "\n") + "\n"
	if status != 1 || errOut != want || !strings.HasPrefix(out, good+": ok:") {
		t.Errorf("bad: status %d\nstderr %s\nwant   %s\nstdout %q", status, errOut, want, out)
	}

	status, _, errOut = runSluice(t, "validate", filepath.Join(t.TempDir(), "missing.yaml"))
	if status != 1 || !strings.HasPrefix(errOut, "validate: policy: open ") {
		t.Errorf("missing: status %d stderr %q", status, errOut)
	}
	if status, _, errOut = runSluice(t, "validate"); status != 2 || !strings.Contains(errOut, "usage: sluice validate") {
		t.Errorf("no file: status %d stderr %q", status, errOut)
	}
	if status, _, _ = runSluice(t, "validate", "-x", good); status != 2 {
		t.Errorf("bad flag: status %d", status)
	}
}

// TestEveryFlagHasItsVariable: every serve flag has its SLUICE_* variable,
// every variable sets its field (SLUICE_ADMIN_HTTP and
// SLUICE_SHUTDOWN_DELAY were once ignored), and `serve -h` lists each.
func TestEveryFlagHasItsVariable(t *testing.T) {
	vars := map[string]string{} // field -> variable
	for _, v := range server.EnvVars {
		vars[v.Field] = v.Name
	}
	for _, f := range serveFlags {
		if vars[f.field] == "" {
			t.Errorf("--%s sets %s, which no SLUICE_* variable sets", flagName(f.field), f.field)
		}
	}
	_, _, usage := runSluice(t, "serve", "-h")
	for _, v := range server.EnvVars {
		if !strings.Contains(usage, v.Name) {
			t.Errorf("serve -h does not list %s", v.Name)
		}
		var cfg server.Config
		sample := map[string]string{"admin_http": "127.0.0.1:0", "on_store_error": "deny"}[v.Field]
		if sample == "" {
			sample = "1"
		}
		err := server.ApplyEnv(&cfg, func(name string) string {
			if name == v.Name {
				return sample
			}
			return ""
		})
		if err != nil && strings.Contains(err.Error(), "unknown config field") {
			t.Errorf("%s: %v", v.Name, err)
		}
		if err == nil && reflect.DeepEqual(cfg, server.Config{}) {
			t.Errorf("%s=%s set nothing", v.Name, sample)
		}
	}
}

// TestValidateAgainst: --against lists the expected paths that match no
// limit (a typo is no limit under unmatched: allow), and exits 1 then.
func TestValidateAgainst(t *testing.T) {
	limits := writeFile(t, "limits.yaml", "schema:\n  user:\n    children:\n      \"*\":\n        limits: [1, 1, 60]\n        children:\n          report: {shadow: true, limits: [1, 1, 60]}\n  audit: {shadow: true, limits: [1, 1, 60]}\n")
	paths := writeFile(t, "paths.txt", "# expected traffic\nuser/alex/trade\nusr/alex\n[\"user\", \"bo\", \"report\"]\naudit/x\n")
	status, out, errOut := runSluice(t, "validate", "--against", paths, limits)
	want := paths + ":3: usr / alex: unmatched: no child matches \"usr\" at the root\n" +
		paths + ":5: audit / x: unmatched: reaches only shadow limits\n" +
		paths + ": 2 of 4 paths match no limit in " + limits + ", and would be allowed (unmatched: allow)\n"
	if status != 1 || !strings.HasSuffix(out, want) || errOut != "" {
		t.Errorf("status %d, stderr %q, stdout:\n%s\nwant it to end:\n%s", status, errOut, out, want)
	}
	good := writeFile(t, "good.txt", "user/alex\n")
	if status, _, _ := runSluice(t, "validate", "--against", good, limits); status != 0 {
		t.Errorf("every path matched: status %d", status)
	}
	bad := writeFile(t, "bad.txt", "[\"user\", 1]\n")
	if status, _, errOut := runSluice(t, "validate", "--against", bad, limits); status != 2 || !strings.Contains(errOut, bad+":1: want a JSON array of strings") {
		t.Errorf("a bad line: status %d %q", status, errOut)
	}
}

// TestValidateConfig: validate --config refuses forward_auth routes that
// let a request through no route decides, unless the config says
// unmatched: allow, and names why; a config whose last route catches
// everything, or that says unmatched: deny, is ok; a bad one prints each
// error with its position.
func TestValidateConfig(t *testing.T) {
	const head = "forward_auth:\n  routes:\n    - match: /api/\n      path: [key, \"{header:X-Api-Key}\"]\n"
	for _, tc := range []struct {
		name, yaml string
		status     int
		out, err   string
	}{
		{"no catch-all", head, 1, "", "forward_auth: a request to a path no route matches (no route has match: /) is allowed and counted nowhere"},
		{"said allow", "forward_auth:\n  unmatched: allow\n" + head[len("forward_auth:\n"):], 0, "ok: 1 route; a request to a path no route matches (no route has match: /) is allowed, counted nowhere (unmatched: allow)", ""},
		{"said deny", "forward_auth:\n  unmatched: deny\n" + head[len("forward_auth:\n"):], 0, "ok: 1 route; every request is decided by a route or refused (unmatched: deny)", ""},
		{"a catch-all", head + "    - match: /\n      path: [ip, \"{client_ip}\"]\n", 0, "ok: 2 routes; every request is decided by a route", ""},
		{"a catch-all of GET", head + "    - match: /\n      methods: [GET]\n      path: [ip, \"{client_ip}\"]\n", 1, "", "a request of another method than GET to a path no route before routes[1] (match: /) matches"},
		{"a catch-all by a key it may lack", head + "    - match: /\n      path: [k, \"{cookie:sid}\"]\n      missing: next\n", 1, "", "a request that lacks a key of routes[1] (match: /, missing: next)"},
		{"a catch-all by a key it denies without", head + "    - match: /\n      path: [k, \"{cookie:sid}\"]\n", 0, "ok: 2 routes; every request is decided by a route", ""},
		{"bad", "forward_auth:\n  routes:\n    - match: /\n      path: [k]\n      missing: maybe\n", 1, "", "sluice.yaml:3:7: forward_auth.routes[0]: missing must be deny or next"},
	} {
		path := writeFile(t, "sluice.yaml", tc.yaml)
		status, out, errOut := runSluice(t, "validate", "--config", path)
		if status != tc.status || tc.out != "" && !strings.Contains(out, path+": "+tc.out) || tc.err != "" && !strings.Contains(errOut, tc.err) {
			t.Errorf("%s: status %d\nstdout %q\nstderr %q\nwant %d, %q, %q", tc.name, status, out, errOut, tc.status, tc.out, tc.err)
		}
	}
	// The shipped configs pass.
	for _, f := range []string{"sluice.example.yaml", "../../docs/proxies/sluice.yaml"} {
		if status, out, errOut := runSluice(t, "validate", "--config", f); status != 0 {
			t.Errorf("%s: status %d %s %s", f, status, out, errOut)
		}
	}
}
