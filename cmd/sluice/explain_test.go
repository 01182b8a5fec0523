package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redis"
)

const explainLimits = `unmatched: deny
schema:
  user:
    children:
      "*":
        limits: [15, 30, 60]
        children:
          trade:
            limits:
              - {algorithm: fixed_window, limit: 1000, window: 1h}
              - {algorithm: gcra, burst: 5, count: 10, period: 1s}
          report:
            shadow: true
            limits: [1, 1, 10m]
          quote:
            limits: {algorithm: token_bucket, burst: 10, rate: 5, per: 1s}
            delay: {max: 2s}
      admin:
        unlimited: true
  tigerfeeding:
    limits: {algorithm: fixed_window, limit: 100, window: 10s}
    children:
      "*":
        limits: {algorithm: gate, interval: 10s}
        allow: [10.0.0.0/8]
        deny: [scraper]
`

func TestExplain(t *testing.T) {
	file := writeFile(t, "limits.yaml", explainLimits)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"user", "alex", "trade"}, `
path: user / alex / trade
LEVEL  PATTERN       KEY                REDIS KEY                                 SLOT  SHADOW  LIMIT
1      user/*        user:alex          sluice:{user:alex}                        8291  no      {"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"}
2      user/*/trade  user:alex:trade#0  sluice:{user:alex}:trade#0%:fixed_window  8291  no      {"algorithm":"fixed_window","limit":1000,"window":"1h0m0s"}
                     user:alex:trade#1  sluice:{user:alex}:trade#1                8291          {"algorithm":"gcra","burst":5,"count":10,"period":"1s"}
level 1, user/*: 16 at once, then 30 a minute (one every 2s)
level 2, user/*/trade: 1000 per 1h window (windows start afresh at each multiple of 1h since 1970-01-01 00:00 UTC)
level 2, user/*/trade: 6 at once, then 10 a second (one every 100ms)
`},
		{[]string{"user", "alex", "withdrawal", "x"}, `
path: user / alex / withdrawal / x
LEVEL  PATTERN  KEY        REDIS KEY           SLOT  SHADOW  LIMIT
1      user/*   user:alex  sluice:{user:alex}  8291  no      {"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"}
level 1, user/*: 16 at once, then 30 a minute (one every 2s)
ignored: withdrawal / x (no child matches below user/*)
`},
		{[]string{"user", "alex", "quote"}, `
path: user / alex / quote
LEVEL  PATTERN       KEY              REDIS KEY                 SLOT  SHADOW  LIMIT
1      user/*        user:alex        sluice:{user:alex}        8291  no      {"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"}
2      user/*/quote  user:alex:quote  sluice:{user:alex}:quote  8291  no      {"algorithm":"token_bucket","burst":10,"rate":5,"per":"1s"}
level 1, user/*: 16 at once, then 30 a minute (one every 2s)
level 2, user/*/quote: 10 at once (a full bucket), then 5 a second (one every 200ms)
delay at user/*/quote: a request its limits would admit within 2s is admitted, held until its time
`},
		{[]string{"user", "admin", "trade"}, `
path: user / admin / trade
unlimited at user/admin: nothing from there down limits the request
`},
		{[]string{"order", "1"}, `
path: order / 1
unmatched: no level with limits on the path; the policy denies it (unmatched: deny)
ignored: order / 1 (no child matches at the root)
`},
		{[]string{"--prefix=app:", "tigerfeeding", "{bob} x"}, `
path: tigerfeeding / "{bob} x"
LEVEL  PATTERN         KEY                         REDIS KEY                                   SLOT   SHADOW  LIMIT
1      tigerfeeding    tigerfeeding                app:{tigerfeeding}%:fixed_window            11442  no      {"algorithm":"fixed_window","limit":100,"window":"10s"}
2      tigerfeeding/*  "tigerfeeding:%7Bbob%7D x"  "app:{tigerfeeding:%257Bbob%257D x}%:gate"  165    no      {"algorithm":"gate","interval":"10s"}
level 1, tigerfeeding: 100 per 10s window (windows start afresh at each multiple of 10s since 1970-01-01 00:00 UTC)
level 2, tigerfeeding/*: one at a time, then none for 10s
`},
		{[]string{"tigerfeeding", "10.2.3.4"}, `
path: tigerfeeding / 10.2.3.4
allow list of tigerfeeding/* matched "10.0.0.0/8": the request is never limited; no level is decided
`},
		{[]string{"tigerfeeding", "scraper"}, `
path: tigerfeeding / scraper
deny list of tigerfeeding/* matched "scraper": the request is always denied (403); no level is decided
`},
		{nil, `
PATTERN         SHADOW  LIMIT  MEANS
user            no      -
user/*          no      {"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"}   16 at once, then 30 a minute (one every 2s)
user/*/trade    no      {"algorithm":"fixed_window","limit":1000,"window":"1h0m0s"}  1000 per 1h window (windows start afresh at each multiple of 1h since 1970-01-01 00:00 UTC)
                        {"algorithm":"gcra","burst":5,"count":10,"period":"1s"}      6 at once, then 10 a second (one every 100ms)
user/*/report   yes     {"algorithm":"gcra","burst":1,"count":1,"period":"10m0s"}    2 at once, then 1 per 10m
user/*/quote    no      {"algorithm":"token_bucket","burst":10,"rate":5,"per":"1s"}  10 at once (a full bucket), then 5 a second (one every 200ms)
user/admin      no      unlimited
tigerfeeding    no      {"algorithm":"fixed_window","limit":100,"window":"10s"}  100 per 10s window (windows start afresh at each multiple of 10s since 1970-01-01 00:00 UTC)
tigerfeeding/*  no      {"algorithm":"gate","interval":"10s"}                    one at a time, then none for 10s
`},
	} {
		args := []string{"explain"}
		path := tc.args
		if len(path) > 0 && strings.HasPrefix(path[0], "--") {
			args, path = append(args, path[0]), path[1:]
		}
		args = append(append(args, file), path...)
		status, out, errOut := runSluice(t, args...)
		if want := strings.TrimPrefix(tc.want, "\n"); status != 0 || out != want || errOut != "" {
			t.Errorf("%q: status %d stderr %q\n got:\n%s\nwant:\n%s", tc.args, status, errOut, out, want)
		}
	}
}

// TestExplainKeyTooLong: explain says when a path's key is longer than a
// store takes, and a check of that path is indeed refused (replay).
func TestExplainKeyTooLong(t *testing.T) {
	file := writeFile(t, "limits.yaml", explainLimits)
	long := strings.Repeat("a", 600)
	status, out, _ := runSluice(t, "explain", file, "user", long)
	if status != 0 || !strings.Contains(out, "key too long: level 1's key is 605 bytes, more than a store takes (512)") {
		t.Errorf("explain: %d\n%s", status, out)
	}
	line, _ := json.Marshal(map[string]any{"path": []string{"user", long}})
	if status, _, errOut := replay(t, string(line)+"\n", "--policy", file); status == 0 || !strings.Contains(errOut, "key of 605 bytes exceeds 512") {
		t.Errorf("replay of the path: %d %s", status, errOut)
	}
	if _, out, _ := runSluice(t, "explain", file, "user", strings.Repeat("a", 100)); strings.Contains(out, "too long") {
		t.Errorf("a key of 105 bytes:\n%s", out)
	}
}

// TestSlots checks what explain shows: one caller's levels share one Redis
// Cluster slot, and a shared level above the wildcard has a slot of its own.
func TestSlots(t *testing.T) {
	p, err := policy.Parse("limits.yaml", []byte(explainLimits))
	if err != nil {
		t.Fatal(err)
	}
	slots := func(path ...string) []int {
		var out []int
		for _, h := range p.Match(path).Hits {
			for j := range h.Limits {
				out = append(out, redis.HashSlot(redis.StateKey(redis.DefaultPrefix, h.Request(j, 0))))
			}
		}
		return out
	}
	if s := slots("user", "alex", "trade"); len(s) != 3 || s[0] != s[1] || s[1] != s[2] {
		t.Errorf("user/alex/trade slots = %v, want one slot", s)
	}
	if s := slots("tigerfeeding", "alex"); len(s) != 2 || s[0] == s[1] {
		t.Errorf("tigerfeeding/alex slots = %v, want two", s)
	}
}

func TestExplainErrors(t *testing.T) {
	file := writeFile(t, "limits.yaml", explainLimits)
	bad := writeFile(t, "bad.yaml", "schema:\n  a: {limits: [1, 2]}\n")
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"explain"}, 2, "usage: sluice explain"},
		{[]string{"explain", "--prefix", "a{b}:", file, "user"}, 2, `explain: prefix "a{b}:" may not contain '{' or '}'`},
		{[]string{"explain", bad, "a"}, 1, bad + ":2:15: schema.a.limits: a [burst, count, period] shorthand has 3 values, got 2\n"},
		{[]string{"explain", file + ".missing", "a"}, 1, "explain: policy: open "},
	} {
		status, out, errOut := runSluice(t, tc.args...)
		if status != tc.status || out != "" || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%q: status %d stdout %q stderr %q, want %d and %q", tc.args, status, out, errOut, tc.status, tc.stderr)
		}
	}
}

// TestExplainNamesTheKeyWritten: for every algorithm, the REDIS KEY that
// explain prints is the key a check through the policy writes in a real
// Redis (explain once printed the key without its shape suffix).
func TestExplainNamesTheKeyWritten(t *testing.T) {
	rd := redistest.Start(t)
	var src strings.Builder
	src.WriteString("schema:\n")
	kinds := algo.Kinds()
	for _, k := range kinds {
		spec, err := json.Marshal(k.Example().Spec())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&src, "  %s:\n    children:\n      \"*\": {limits: [%s]}\n", k, spec)
	}
	file := writeFile(t, "limits.yaml", src.String())
	for _, k := range kinds {
		path := []string{k.String(), "{alex}:1"}
		// At an explicit time, so that the key lives a minute past its
		// state (expire.lua): a token bucket's lives 200ms, which a busy
		// machine outlasts before the test looks.
		line, _ := json.Marshal(map[string]any{"path": path, "t_ns": time.Now().UnixNano()})
		if status, out, errOut := replay(t, string(line)+"\n", "--policy", file, "--store", rd.URL()); status != 0 || !strings.Contains(out, `"allowed":true`) {
			t.Fatalf("%v: replay status %d: %s %s", k, status, out, errOut)
		}
		status, out, errOut := runSluice(t, append([]string{"explain", file}, path...)...)
		if status != 0 {
			t.Fatalf("%v: explain status %d: %s", k, status, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) >= 4 && strings.HasPrefix(lines[3], "level 1, ") {
			lines = lines[:3] // the level's limit in words, and a concurrency level's slots
		}
		if len(lines) != 3 {
			t.Fatalf("%v: explain printed\n%s", k, out)
		}
		cols := strings.Fields(lines[2])
		name, err := strconv.Unquote(cols[3])
		if err != nil {
			name = cols[3]
		}
		if got, err := rd.Do("EXISTS", name); err != nil || got != "1" {
			t.Errorf("%v: explain's REDIS KEY %q: EXISTS %q, %v; Redis holds %s", k, name, got, err, keys(t, rd))
		}
	}
}

func keys(t *testing.T, rd *redistest.Server) string {
	out, err := rd.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSlotsExplainedAndValidated: explain says what a concurrency level
// does, and validate names the file, line and field of each bad
// concurrency limit (a zero limit, a zero or absurd hold_for, a lease, a
// delay, a field it does not take).
func TestSlotsExplainedAndValidated(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.yaml"
	writeTestFile(t, good, "schema:\n  exports:\n    children:\n      \"*\": {limits: [{algorithm: concurrency, limit: 10, hold_for: 30s}]}\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), env{strings.NewReader(""), &out, &errOut}, []string{"explain", good, "exports", "acme"}); code != 0 ||
		!strings.Contains(out.String(), "slots at exports/*: at most 10 held at once") || !strings.Contains(out.String(), "loses them 30s after its last renewal") {
		t.Fatalf("explain: %d\n%s%s", code, out.String(), errOut.String())
	}
	bad := dir + "/bad.yaml"
	writeTestFile(t, bad, `schema:
  zero: {limits: [{algorithm: concurrency, limit: 0, hold_for: 30s}]}
  hold: {limits: [{algorithm: concurrency, limit: 3, hold_for: 0s}]}
  long: {limits: [{algorithm: concurrency, limit: 3, hold_for: 48h}]}
  many: {limits: [{algorithm: concurrency, limit: 100001, hold_for: 1m}]}
  lease: {lease: true, limits: [{algorithm: concurrency, limit: 3, hold_for: 1m}]}
  delay: {delay: {max: 1s}, limits: [{algorithm: concurrency, limit: 3, hold_for: 1m}]}
  extra: {limits: [{algorithm: concurrency, limit: 3, hold_for: 1m, window: 1s}]}
`)
	out.Reset()
	errOut.Reset()
	code := run(context.Background(), env{strings.NewReader(""), &out, &errOut}, []string{"validate", bad})
	for _, want := range []string{
		bad + ":2:51: schema.zero.limits[0].limit: concurrency limit must be 1 to 100000 slots, got 0",
		bad + ":3:64: schema.hold.limits[0].hold_for: hold_for must be 1ms to 24h0m0s, got 0s",
		bad + ":4:64: schema.long.limits[0].hold_for: hold_for must be 1ms to 24h0m0s, got 48h0m0s",
		bad + ":5:51: schema.many.limits[0].limit: concurrency limit must be 1 to 100000 slots, got 100001",
		"schema.lease.lease: limit 0 is concurrency: only a fixed_window limit can be leased",
		"schema.delay.delay: limit 0 is concurrency: delay is for gcra and token_bucket",
		`schema.extra.limits[0].window: concurrency does not take "window"`,
		bad + ": 7 errors",
	} {
		if code != 1 || !strings.Contains(errOut.String(), want) {
			t.Errorf("validate: %d, stderr lacks %q:\n%s", code, want, errOut.String())
		}
	}
}

// TestBlocksExplainedValidatedReplayed: explain says what a block does;
// validate names the field of each bad block (and refuses a lease with
// one); replay plays the conformance trace of a blocking GCRA, with
// "denied_by": "block", on both stores.
func TestBlocksExplainedValidatedReplayed(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.yaml"
	writeTestFile(t, good, "schema:\n  login:\n    children:\n      \"*\": {limits: [{algorithm: sliding_log, limits: [{limit: 5, window: 1m}], block: {for: 30s, growth: 2, max: 1h}}]}\n")
	status, out, errOut := runSluice(t, "explain", good, "login", "1.2.3.4")
	if status != 0 || !strings.Contains(out, "block at login/*: a key that goes over is denied for 30s; each further block within 24h0m0s of the last one's end is 2x longer, up to 1h0m0s") {
		t.Fatalf("explain: %d\n%s%s", status, out, errOut)
	}
	bad := dir + "/bad.yaml"
	writeTestFile(t, bad, `schema:
  a: {limits: [{algorithm: gcra, burst: 1, count: 1, period: 1s, block: {growth: 2}}]}
  b: {limits: [{algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, growth: 0.5}}]}
  c: {limits: [{algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 10s, max: 1s}}]}
  d: {limits: [{algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, forget_after: 9000h}}]}
  e: {lease: true, limits: [{algorithm: fixed_window, limit: 5, window: 1m, block: {for: 1s}}]}
  f: {limits: [{algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, growth: 1000000000000000000}}]}
`)
	status, _, errOut = runSluice(t, "validate", bad)
	for _, want := range []string{
		bad + ":2:73: schema.a.limits[0].block.for: block for must be 1ms to 8760h0m0s, got 0s",
		bad + ":3:73: schema.b.limits[0].block.growth: block growth must be 1 to 1000, got 0.5",
		bad + ":4:73: schema.c.limits[0].block.max: block max must be from for (10s) to 8760h0m0s, got 1s",
		bad + ":5:73: schema.d.limits[0].block.forget_after: block forget_after must be 0 (24h) to 8760h0m0s, got 9000h0m0s",
		bad + ":6:7: schema.e.lease: limit 0 has a block",
		bad + ":7:73: schema.f.limits[0].block.growth: block growth must be 1 to 1000, got 1e+18",
		bad + ": 6 errors",
	} {
		if status != 1 || !strings.Contains(errOut, want) {
			t.Errorf("validate: %d, stderr lacks %q:\n%s", status, want, errOut)
		}
	}

	replayTrace(t, "gcra/block")
}

// TestDebtExplainedReplayed: explain says what a debt does; replay takes
// debt in a limit's JSON spec and plays the conformance trace of a fixed
// window with debt (denied charges recorded) on both stores.
func TestDebtExplainedReplayed(t *testing.T) {
	pol := t.TempDir() + "/debt.yaml"
	writeTestFile(t, pol, "schema:\n  llm:\n    children:\n      \"*\": {debt: true, limits: {algorithm: fixed_window, limit: 100000, window: 1h}}\n")
	status, out, errOut := runSluice(t, "explain", pol, "llm", "acme")
	if status != 0 || !strings.Contains(out, "debt at llm/*: a charge past the limit is recorded in full") {
		t.Fatalf("explain: %d\n%s%s", status, out, errOut)
	}
	if spec := replayTrace(t, "fixed_window/debt"); !strings.Contains(spec, `"debt":true`) {
		t.Fatalf("the replayed spec %s has no debt", spec)
	}
}

// TestCalendarExplainedReplayed: explain says when a calendar window
// resets; replay takes window: month (and its zone and anchor day) in a
// limit's JSON spec and reproduces the conformance trace through month
// ends in Berlin, with explicit times, on both stores.
func TestCalendarExplainedReplayed(t *testing.T) {
	pol := t.TempDir() + "/quota.yaml"
	writeTestFile(t, pol, "schema:\n  api:\n    children:\n      \"*\": {limits: {algorithm: fixed_window, limit: 100000, window: month, time_zone: Europe/Berlin}}\n")
	status, out, errOut := runSluice(t, "explain", pol, "api", "acme")
	if status != 0 || !strings.Contains(out, "100000 a calendar month (resets on the 1st at 00:00 Europe/Berlin)") {
		t.Fatalf("explain: %d\n%s%s", status, out, errOut)
	}
	if spec := replayTrace(t, "fixed_window/calendar-month"); !strings.Contains(spec, `"window":"month"`) {
		t.Fatalf("the replayed spec %s is not a calendar month", spec)
	}
	replayTrace(t, "fixed_window/calendar-day")
}
