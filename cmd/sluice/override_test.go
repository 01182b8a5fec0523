package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeOverrides: an override set on one `sluice serve` (admin API) or
// by the CLI applies on another on the same Redis within its poll (250ms)
// and a round trip, measured here; removed, the configured limit returns.
func TestServeOverrides(t *testing.T) {
	t.Setenv("SLUICE_TIMEOUT", cliTimeout) // the CLI's round trips (see TestServeChanges)
	rd := redistest.Start(t)
	pol := policyFile(t, "schema:\n  key:\n    children:\n      \"*\": {limits: {algorithm: fixed_window, limit: 3, window: 1h}}\n")
	const token = "t0ken-for-tests"
	env := []string{"SLUICE_ADMIN_TOKEN=" + token}
	a := serve(t, env, append(local, "--store", rd.URL(), "--policy", pol)...)
	b := serve(t, env, append(local, "--store", rd.URL(), "--policy", pol)...)
	// until polls b's answer for path until its limit is want, and says
	// how long that took.
	until := func(what, path string, want string) {
		t.Helper()
		start := time.Now()
		for {
			r := b.check(`{"path": ` + path + `, "cost": 0}`)
			if strings.Contains(string(r.body), `"limit":`+want+`,`) {
				break
			}
			if time.Since(start) > time.Minute { // far past the bound, on any machine
				t.Fatalf("%s: the other instance still answers %s", what, r.body)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s reached the other instance in %v", what, time.Since(start))
	}
	r := do(t, "POST", "http://"+a.http+"/admin/v1/overrides", token, `{"path": ["key", "acme"], "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "1h"}], "for": "1h"}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"node":"key/*"`) {
		t.Fatalf("set by the admin API: %d %s", r.status, r.body)
	}
	until("an override by the admin API", `["key", "acme"]`, "5")
	if status, out, errOut := runSluice(t, "override", "set", "--store", rd.URL(), "--policy", pol, "--factor", "10", "key", "trial-*"); status != 0 {
		t.Fatalf("override set: %d %s %s", status, out, errOut)
	}
	until("an override by the CLI", `["key", "trial-42"]`, "30")
	if status, out, _ := runSluice(t, "override", "list", "--store", rd.URL(), "--policy", pol); status != 0 || !strings.Contains(out, `"key":"key:trial-*"`) || !strings.Contains(out, `"factor":10`) {
		t.Fatalf("override list: %d %s", status, out)
	}
	// explain --store says which override applies to a key. (Its one read
	// of the store has the service's default timeout, 50ms, which a busy
	// machine may miss: a read that timed out is made again.)
	explain := func(key string) (int, string, string) {
		t.Helper()
		for start := time.Now(); ; {
			status, out, errOut := runSluice(t, "explain", "--store", rd.URL(), pol, "key", key)
			if status == 0 || !strings.Contains(errOut, "context deadline exceeded") || time.Since(start) > waitLimit {
				return status, out, errOut
			}
		}
	}
	if status, out, errOut := explain("trial-42"); status != 0 || !strings.Contains(out, "override at key/* for key:trial-42 (key:trial-*): its limits times 10, until removed") {
		t.Fatalf("explain --store: %d\n%s%s", status, out, errOut)
	}
	if _, out, _ := explain("acme"); !strings.Contains(out, `override at key/* for key:acme (key:acme): {"algorithm":"fixed_window","limit":5,"window":"1h0m0s"}, until 20`) {
		t.Fatalf("explain --store for acme:\n%s", out)
	}
	if r := do(t, "DELETE", "http://"+a.http+"/admin/v1/overrides?path=key&path=acme", token, ""); r.status != 200 {
		t.Fatalf("remove by the admin API: %d %s", r.status, r.body)
	}
	until("a removal by the admin API", `["key", "acme"]`, "3")
	if status, _, errOut := runSluice(t, "override", "remove", "--store", rd.URL(), "--policy", pol, "key", "trial-*"); status != 0 {
		t.Fatalf("override remove: %d %s", status, errOut)
	}
	until("a removal by the CLI", `["key", "trial-42"]`, "3")
	// An override for 300ms applies, then ends by the clock (Redis's, as
	// read with the board). A machine too busy for the other instance to
	// poll within the 300ms sees it end unseen (the test then waited a
	// minute for it, and failed): another key, for three times as long,
	// until one is seen.
	brief := func(key string, d time.Duration) bool {
		t.Helper()
		r := do(t, "POST", "http://"+a.http+"/admin/v1/overrides", token, fmt.Sprintf(`{"path": ["key", %q], "factor": 2, "for": %q}`, key, d))
		if r.status != 200 {
			t.Fatalf("set for %v: %d %s", d, r.status, r.body)
		}
		over := time.Now().Add(d + time.Second) // past its end by Redis's clock, this machine's
		for time.Now().Before(over) {
			if strings.Contains(string(b.check(`{"path": ["key", "`+key+`"], "cost": 0}`).body), `"limit":6,`) {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	key, d := "brief-0", 300*time.Millisecond
	for i := 1; !brief(key, d); i++ {
		if d >= waitLimit {
			t.Fatalf("an override for %v ended before the other instance saw it", d)
		}
		t.Logf("an override for %v ended before the other instance saw it; again for %v", d, 3*d)
		key, d = fmt.Sprint("brief-", i), 3*d
	}
	for end := time.Now().Add(d + waitLimit); !strings.Contains(string(b.check(`{"path": ["key", "`+key+`"], "cost": 0}`).body), `"limit":3,`); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("an override for %v did not end", d)
		}
	}
	// Refused: an override that would change nothing (over before it
	// starts: before, a negative --for made it last until removed).
	for _, bad := range []string{`{"path": ["nope"], "factor": 2}`, `{"path": ["key", "x"], "factor": 0}`, `{"path": ["key", "x"], "factor": 2, "for": "1h", "until": "2030-01-01T00:00:00Z"}`,
		`{"path": ["key", "x"], "factor": 2, "for": "-1h"}`, `{"path": ["key", "x"], "factor": 2, "for": "0s"}`, `{"path": ["key", "x"], "factor": 2, "until": "2020-01-01T00:00:00Z"}`} {
		if r := do(t, "POST", "http://"+a.http+"/admin/v1/overrides", token, bad); r.status != 400 {
			t.Errorf("set %s: %d %s", bad, r.status, r.body)
		}
	}
	if status, _, errOut := runSluice(t, "override", "set", "--store", rd.URL(), "--policy", pol, "--factor", "2", "--for", "-1h", "key", "x"); status != 2 || !strings.Contains(errOut, "--for must be positive") {
		t.Errorf("override set --for -1h: %d %s", status, errOut)
	}
	if _, out, _ := runSluice(t, "override", "list", "--store", rd.URL(), "--policy", pol); strings.Contains(out, `"key:x"`) {
		t.Errorf("a refused override was set: %s", out)
	}
}
