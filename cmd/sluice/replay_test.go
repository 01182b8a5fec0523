package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// replay runs `sluice replay` in-process on the given input.
func replay(t *testing.T, input string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(context.Background(), env{strings.NewReader(input), &out, &errOut}, append([]string{"replay"}, args...))
	return status, out.String(), errOut.String()
}

// t0 is the README's t_ns; at returns it plus ms milliseconds.
const t0 = 1800003000334587000

func at(ms int64) int64 { return t0 + ms*1_000_000 }

type replayStep struct {
	t    int64
	key  string
	lim  string
	cost int64
	want string
}

func (s replayStep) line() string {
	return fmt.Sprintf(`{"t_ns": %d, "key": %q, "limit": %s, "cost": %d}`, s.t, s.key, s.lim, s.cost)
}

const (
	binaryLog = `{"algorithm": "sliding_log", "limits": [{"limit": 3, "window": "10s"}, {"limit": 2, "window": "1s"}], "min_gap": "100ms"}`
	namedLog  = `{"algorithm": "sliding_log", "limits": {"ten": {"limit": 3, "window": "10s"}, "one": {"limit": 2, "window": "1s"}}, "min_gap": "100ms"}`
	naryLog   = `{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "mode": "nary"}`
	uniLog    = `{"algorithm": "sliding_log", "limits": [{"limit": 2, "window": "1s"}], "mode": "uniform"}`
	sampled   = `{"algorithm": "sliding_log", "limits": [{"limit": 4, "window": "1s"}], "buckets": 4}`
	counter   = `{"algorithm": "window_counter", "slice": "1s", "limits": [{"limit": 3, "window": "1s"}, {"limit": 4, "window": "3s"}, {"limit": 5, "window": "5s"}]}`
)

// The results are conformance's hand-checked traces of the same limits.
var replaySteps = []replayStep{
	{t0, "b", binaryLog, 1, `{"allowed":true,"limit":2,"remaining":1,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(50), "b", binaryLog, 1, `{"allowed":false,"limit":2,"remaining":1,"retry_after_ns":50000000,"reset_after_ns":9950000000,"admitted":0,"denied_by":"min_gap"}`},
	{at(100), "b", binaryLog, 1, `{"allowed":true,"limit":2,"remaining":0,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(300), "b", binaryLog, 1, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ns":700000000,"reset_after_ns":9800000000,"admitted":0,"denied_by":"1s"}`},
	{at(1000), "b", binaryLog, 1, `{"allowed":true,"limit":2,"remaining":0,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(1000), "b", binaryLog, 2, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ns":9100000000,"reset_after_ns":10000000000,"admitted":0,"denied_by":"10s"}`},
	{at(1000), "b", binaryLog, 3, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ns":-1,"reset_after_ns":10000000000,"admitted":0,"denied_by":"1s"}`},
	// Named limits, ordered by window: denied_by names them.
	{t0, "n", namedLog, 1, `{"allowed":true,"limit":2,"remaining":1,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(100), "n", namedLog, 1, `{"allowed":true,"limit":2,"remaining":0,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(300), "n", namedLog, 1, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ns":700000000,"reset_after_ns":9800000000,"admitted":0,"denied_by":"one"}`},
	{at(1000), "n", namedLog, 1, `{"allowed":true,"limit":2,"remaining":0,"retry_after_ns":0,"reset_after_ns":10000000000,"admitted":1}`},
	{at(1000), "n", namedLog, 2, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ns":9100000000,"reset_after_ns":10000000000,"admitted":0,"denied_by":"ten"}`},
	// Nary admits part of a batch.
	{t0, "y", naryLog, 3, `{"allowed":true,"limit":5,"remaining":2,"retry_after_ns":0,"reset_after_ns":1000000000,"admitted":3}`},
	{at(200), "y", naryLog, 4, `{"allowed":false,"limit":5,"remaining":0,"retry_after_ns":1000000000,"reset_after_ns":1000000000,"admitted":2,"denied_by":"1s"}`},
	// Uniform records the denied attempt: remaining goes negative.
	{t0, "u", uniLog, 2, `{"allowed":true,"limit":2,"remaining":0,"retry_after_ns":0,"reset_after_ns":1000000000,"admitted":2}`},
	{at(200), "u", uniLog, 1, `{"allowed":false,"limit":2,"remaining":-1,"retry_after_ns":800000000,"reset_after_ns":1000000000,"admitted":0,"denied_by":"1s"}`},
	// Sampled in 250ms buckets.
	{t0, "s", sampled, 2, `{"allowed":true,"limit":4,"remaining":2,"retry_after_ns":0,"reset_after_ns":1165413000,"admitted":2}`},
	{at(500), "s", sampled, 2, `{"allowed":true,"limit":4,"remaining":0,"retry_after_ns":0,"reset_after_ns":1165413000,"admitted":2}`},
	{at(1000), "s", sampled, 1, `{"allowed":false,"limit":4,"remaining":0,"retry_after_ns":165413000,"reset_after_ns":665413000,"admitted":0,"denied_by":"1s"}`},
	// The window counter reports the window that denied.
	{t0, "w", counter, 2, `{"allowed":true,"limit":3,"remaining":1,"retry_after_ns":0,"reset_after_ns":4665413000,"admitted":2}`},
	{at(500), "w", counter, 2, `{"allowed":false,"limit":3,"remaining":1,"retry_after_ns":165413000,"reset_after_ns":4165413000,"admitted":0,"denied_by":"1s"}`},
	{at(665) + 413000, "w", counter, 2, `{"allowed":true,"limit":3,"remaining":0,"retry_after_ns":0,"reset_after_ns":5000000000,"admitted":2}`},
	{at(1665) + 413000, "w", counter, 1, `{"allowed":false,"limit":3,"remaining":0,"retry_after_ns":1000000000,"reset_after_ns":4000000000,"admitted":0,"denied_by":"3s"}`},
	{at(2665) + 413000, "w", counter, 1, `{"allowed":true,"limit":3,"remaining":0,"retry_after_ns":0,"reset_after_ns":5000000000,"admitted":1}`},
	{at(2665) + 413000, "w", counter, 1, `{"allowed":false,"limit":3,"remaining":0,"retry_after_ns":2000000000,"reset_after_ns":5000000000,"admitted":0,"denied_by":"5s"}`},
	// The other algorithms report admitted too.
	{t0, "g", `{"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}`, 1, `{"allowed":true,"limit":16,"remaining":15,"retry_after_ns":0,"reset_after_ns":2000000000,"admitted":1}`},
}

func TestReplayWindowed(t *testing.T) {
	var in, want strings.Builder
	for _, s := range replaySteps {
		in.WriteString(s.line() + "\n")
		want.WriteString(s.want + "\n")
	}
	srv := redistest.Start(t)
	for _, store := range []string{"memory", srv.URL()} {
		t.Run(store, func(t *testing.T) {
			status, out, errOut := replay(t, in.String(), "--store", store)
			if status != 0 || errOut != "" {
				t.Fatalf("status %d, stderr %q", status, errOut)
			}
			got, exp := strings.Split(out, "\n"), strings.Split(want.String(), "\n")
			for i := range exp {
				if i >= len(got) || got[i] != exp[i] {
					g := "(none)"
					if i < len(got) {
						g = got[i]
					}
					t.Fatalf("line %d (%s):\n got %s\nwant %s", i+1, replaySteps[i].line(), g, exp[i])
				}
			}
		})
	}
}

// TestReplayBadWindowedLimits: each bad line stops the replay with exit
// status 1 and an error naming the line and the problem; the lines before
// it are applied and printed.
func TestReplayBadWindowedLimits(t *testing.T) {
	good := replaySteps[0]
	for _, tc := range []struct{ lim, cost, want string }{
		{`{"algorithm": "sliding_log", "limits": [{"limit": 3, "window": "0s"}]}`, "1", "sliding_log limits[0] window must be positive, got 0s"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 3, "window": "-1s"}]}`, "1", "window must be positive, got -1s"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 0, "window": "1s"}]}`, "1", "sliding_log limits[0]: limit must be positive, got 0"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": -5, "window": "1s"}]}`, "1", "limit must be positive, got -5"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "buckets": 0}`, "1", "sliding_log buckets must be positive, got 0"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "buckets": -3}`, "1", "sliding_log buckets must be positive, got -3"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "min_gap": "2s"}`, "1", "sliding_log min_gap 2s is longer than the longest window 1s"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "mode": "sometimes"}`, "1", `unknown sliding_log mode "sometimes"`},
		{`{"algorithm": "sliding_log"}`, "1", "sliding_log needs at least one limit"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": 1}]}`, "1", "duration must be a string"},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s", "burst": 2}]}`, "1", `unknown field "burst"`},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}], "slice": "1s"}`, "1", `sliding_log does not take "slice"`},
		{`{"algorithm": "sliding_log", "limits": [{"limit": 5, "window": "1s"}]}`, "-1", "negative cost -1"},
		{`{"algorithm": "window_counter", "limits": [{"limit": 5, "window": "1500ms"}]}`, "1", "window 1.5s is not a whole number of 1s slices"},
		{`{"algorithm": "window_counter", "slice": "-1s", "limits": [{"limit": 5, "window": "1s"}]}`, "1", "window_counter slice must be positive, got -1s"},
		{`{"algorithm": "window_counter", "limits": [{"limit": 5, "window": "0s"}]}`, "1", "window_counter limits[0] window must be positive, got 0s"},
		{`{"algorithm": "window_counter", "limits": [{"limit": 0, "window": "1s"}]}`, "1", "window_counter limits[0]: limit must be positive, got 0"},
		{`{"algorithm": "window_counter", "limits": [{"limit": 5, "window": "1s"}], "mode": "nary"}`, "1", `window_counter does not take "mode"`},
		{`{"algorithm": "fixed_window", "limit": 5, "window": "1s", "limits": [{"limit": 5, "window": "1s"}]}`, "1", `fixed_window does not take "limits"`},
	} {
		in := good.line() + "\n" + fmt.Sprintf(`{"t_ns": %d, "key": "bad", "limit": %s, "cost": %s}`, t0, tc.lim, tc.cost) + "\n" + good.line() + "\n"
		status, out, errOut := replay(t, in)
		if status != 1 || out != good.want+"\n" || !strings.HasPrefix(errOut, "replay: line 2: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("limit %s cost %s:\nstatus %d\nstdout %q\nstderr %q\nwant stderr with %q", tc.lim, tc.cost, status, out, errOut, tc.want)
		}
	}
}

// TestReplayPolicy: path events through a limits.yaml, on both stores; a
// denied trade does not charge user:alex, and bad lines name their number.
func TestReplayPolicy(t *testing.T) {
	file := t.TempDir() + "/limits.yaml"
	if err := os.WriteFile(file, []byte(`schema:
  user:
    children:
      "*":
        limits: [15, 30, 60]
        children:
          trade:
            limits: [5, 10, 15]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := 0; i < 7; i++ {
		fmt.Fprintf(&in, `{"t_ns": %d, "path": ["user", "alex", "trade"], "cost": 1}`+"\n", int64(t0))
	}
	fmt.Fprintf(&in, `{"t_ns": %d, "path": ["user", "alex", "withdrawal"]}`+"\n", int64(t0))
	fmt.Fprintf(&in, `{"t_ns": %d, "path": ["nobody"]}`+"\n", int64(t0))
	srv := redistest.Start(t)
	for _, store := range []string{"memory", srv.URL()} {
		t.Run(store, func(t *testing.T) {
			status, out, errOut := replay(t, in.String(), "--store", store, "--policy", file)
			if status != 0 || errOut != "" {
				t.Fatalf("status %d, stderr %q", status, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 9 {
				t.Fatalf("%d lines:\n%s", len(lines), out)
			}
			want := map[int]string{
				0: `{"allowed":true,"limit":6,"remaining":5,"retry_after_ns":0,"reset_after_ns":2000000000,"matched":true,"levels":[{"pattern":"user/*","key":"user:alex","spec":{"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"},"shadow":false,"allowed":true,"limit":16,"remaining":15,"retry_after_ns":0,"reset_after_ns":2000000000},{"pattern":"user/*/trade","key":"user:alex:trade","spec":{"algorithm":"gcra","burst":5,"count":10,"period":"15s"},"shadow":false,"allowed":true,"limit":6,"remaining":5,"retry_after_ns":0,"reset_after_ns":1500000000}]}`,
				6: `{"allowed":false,"limit":6,"remaining":0,"retry_after_ns":1500000000,"reset_after_ns":12000000000,"matched":true,"levels":[{"pattern":"user/*","key":"user:alex","spec":{"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"},"shadow":false,"allowed":true,"limit":16,"remaining":10,"retry_after_ns":0,"reset_after_ns":12000000000},{"pattern":"user/*/trade","key":"user:alex:trade","spec":{"algorithm":"gcra","burst":5,"count":10,"period":"15s"},"shadow":false,"allowed":false,"limit":6,"remaining":0,"retry_after_ns":1500000000,"reset_after_ns":9000000000}]}`,
				7: `{"allowed":true,"limit":16,"remaining":9,"retry_after_ns":0,"reset_after_ns":14000000000,"matched":true,"levels":[{"pattern":"user/*","key":"user:alex","spec":{"algorithm":"gcra","burst":15,"count":30,"period":"1m0s"},"shadow":false,"allowed":true,"limit":16,"remaining":9,"retry_after_ns":0,"reset_after_ns":14000000000}]}`,
				8: `{"allowed":true,"limit":0,"remaining":0,"retry_after_ns":0,"reset_after_ns":0,"matched":false,"levels":[]}`,
			}
			for i, w := range want {
				if lines[i] != w {
					t.Errorf("line %d:\n got %s\nwant %s", i+1, lines[i], w)
				}
			}
		})
	}
	for _, bad := range []string{
		`{"t_ns": 1, "key": "a", "path": ["user"]}`,
		`{"t_ns": 1, "path": []}`,
		`{"t_ns": 1, "path": ["user", "alex"], "cost": -1}`,
	} {
		status, _, errOut := replay(t, `{"path": ["user", "bob"]}`+"\n"+bad+"\n", "--policy", file)
		if status != 1 || !strings.Contains(errOut, "line 2:") {
			t.Errorf("%s: status %d, stderr %q; want 1 and line 2", bad, status, errOut)
		}
	}
	if status, _, errOut := replay(t, `{"path": ["user"]}`+"\n"); status != 1 || !strings.Contains(errOut, "needs --policy") {
		t.Errorf("a path without --policy: status %d, stderr %q", status, errOut)
	}
}

// TestReplayReadmeExample: the README's event and result, and a bad line
// that stops the replay with nothing after it applied.
func TestReplayReadmeExample(t *testing.T) {
	ev := `{"t_ns": 1800003000334587000, "key": "a", "limit": {"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}, "cost": 1}`
	in := ev + "\n" + `{"t_ns": 1, "key": "a", "limit": {"algorithm": "gcra", "burst": 15, "count": 0, "period": "60s"}}` + "\n" + ev + "\n"
	status, out, errOut := replay(t, in)
	want := `{"allowed":true,"limit":16,"remaining":15,"retry_after_ns":0,"reset_after_ns":2000000000,"admitted":1}` + "\n"
	if status != 1 || out != want || !strings.Contains(errOut, "line 2: limit: invalid limit: gcra count must be positive") {
		t.Fatalf("status %d\nstdout %q\nstderr %q", status, out, errOut)
	}
}

// FuzzParseEvent: a replay line is a valid request or an error, never a
// panic.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"t_ns": 1800003000334587000, "key": "a", "limit": {"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}, "cost": 1}`,
		`{"key": "a", "limit": {"algorithm": "sliding_log", "limits": {"h": {"limit": 5, "window": "1h"}}, "buckets": 4}}`,
		`{"key": "a", "limit": {"algorithm": "window_counter", "limits": [{"limit": 5, "window": "1s"}]}, "cost": -1}`,
		`{"t_ns": -5, "key": "", "limit": null}`, `{"path": ["a"]}`, `[]`, `{"key": "a", "limit": {"algorithm": "gate", "interval": "9999999999h"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, _, _, err := parseEvent(line)
		if err == nil {
			if err := store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
				t.Fatalf("%q parsed into an invalid request: %v", line, err)
			}
		}
	})
}

// TestReplayUsageNamesEveryKind: `sluice replay -h` shows an example limit
// of every algorithm, taken from algo's registry.
func TestReplayUsageNamesEveryKind(t *testing.T) {
	status, _, usage := replay(t, "", "-h")
	if status != 0 {
		t.Fatalf("replay -h: status %d", status)
	}
	for _, k := range algo.Kinds() {
		if !strings.Contains(usage, `"algorithm":"`+k.String()+`"`) {
			t.Errorf("replay -h does not describe %s:\n%s", k, usage)
		}
	}
}

// replayTrace replays the conformance trace of that name on the memory
// store and on Redis, as events (with a step's permit and op if it has
// them), and
// fails t unless each prints the trace's hand-checked results (with
// "denied_by": "block" for a block's). It returns the trace's limit as
// JSON.
func replayTrace(t *testing.T, name string) string {
	t.Helper()
	var tr conformance.Trace
	for _, c := range conformance.Traces {
		if c.Name == name {
			tr = c
		}
	}
	spec, err := json.Marshal(tr.Limit.Spec())
	if err != nil || len(tr.Steps) == 0 {
		t.Fatalf("trace %s: %v", name, err)
	}
	var in, want strings.Builder
	for _, s := range tr.Steps {
		key := s.Key
		if key == "" {
			key = "k"
		}
		slot := ""
		if s.Permit != 0 || s.Op != algo.Acquire {
			slot = fmt.Sprintf(`, "permit": %d, "op": %q`, s.Permit, s.Op)
		}
		fmt.Fprintf(&in, `{"t_ns": %d, "key": %q, "limit": %s, "cost": %d%s}`+"\n", conformance.T0.Add(s.At).UnixNano(), key, spec, s.Cost, slot)
		w := s.Want
		by := ""
		if w.DeniedBy == algo.DeniedByBlock {
			by = `,"denied_by":"block"`
		}
		fmt.Fprintf(&want, `{"allowed":%v,"limit":%d,"remaining":%d,"retry_after_ns":%d,"reset_after_ns":%d,"admitted":%d%s}`+"\n", w.Allowed, w.Quota, w.Remaining, int64(w.RetryAfter), int64(w.ResetAfter), w.Admitted, by)
	}
	srv := redistest.Start(t)
	for _, st := range []string{"memory", srv.URL()} {
		status, out, errOut := replay(t, in.String(), "--store", st)
		if status != 0 || errOut != "" || out != want.String() {
			t.Fatalf("%s on %s: status %d, stderr %q\n got %s\nwant %s", name, st, status, errOut, out, want.String())
		}
	}
	return string(spec)
}

// TestReplaySlots: the conformance trace of a concurrency limit, replayed
// as events with permits and ops, gives its hand-checked results on both
// stores; a bad op, a permit on another algorithm, a renewal without a
// permit and an id out of range each stop the replay at their line.
func TestReplaySlots(t *testing.T) {
	spec := replayTrace(t, "concurrency")
	gcra := `{"algorithm": "gcra", "burst": 1, "count": 1, "period": "1s"}`
	for bad, msg := range map[string]string{
		`{"key": "a", "limit": ` + spec + `, "permit": 1, "op": "steal"}`:                   `"op" must be acquire, renew or release`,
		`{"key": "a", "limit": ` + gcra + `, "permit": 1}`:                                  "has no permits",
		`{"key": "a", "limit": ` + spec + `, "op": "renew"}`:                                "a renewal needs a permit id",
		`{"key": "a", "limit": ` + spec + `, "permit": 9007199254740992}`:                   "outside 1..9007199254740991",
		`{"key": "a", "limit": {"algorithm": "concurrency", "limit": 3, "hold_for": "0s"}}`: "hold_for must be",
	} {
		status, _, errOut := replay(t, bad+"\n")
		if status != 1 || !strings.Contains(errOut, "line 1:") || !strings.Contains(errOut, msg) {
			t.Errorf("%s: status %d, stderr %q; want line 1 and %q", bad, status, errOut, msg)
		}
	}
}
