package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/policy"
)

func zooStrategies(t testing.TB) []Strategy {
	var out []Strategy
	for _, src := range Scenarios["zoo"].Strategies {
		s, err := CompileStrategy(src)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestDeterministic: the same seed gives byte-identical series; another
// seed another one.
func TestDeterministic(t *testing.T) {
	csv := func(seed uint64) []byte {
		res, err := Run(context.Background(), Scenarios["zoo"], seed, Params{Duration: 30 * time.Second}, zooStrategies(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := writeCSV(&b, res); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b, c := csv(7), csv(7), csv(8)
	if !bytes.Equal(a, b) {
		t.Error("the same seed gave different series")
	}
	if bytes.Equal(a, c) {
		t.Error("another seed gave the same series")
	}
	if !bytes.HasPrefix(a, []byte("t_ms,strategy,offered,admitted,in_flight\n0,gate per caller,")) {
		t.Errorf("series starts %q", a[:min(80, len(a))])
	}
	for _, name := range slices.Sorted(maps.Keys(Scenarios)) {
		sc := Scenarios[name]
		if ev := sc.Events(1, sc.Defaults); len(ev) == 0 {
			t.Errorf("%s: no events", name)
		} else {
			for i := 1; i < len(ev); i++ {
				if ev[i].At < ev[i-1].At {
					t.Fatalf("%s: events out of order at %d", name, i)
				}
			}
		}
	}
}

// TestSummaryByHand: a small scenario whose summary is worked out by hand.
func TestSummaryByHand(t *testing.T) {
	// A asks at 0, 1, 2 s; B at 3 s; a shared window of 3 per 10 s
	// (T0 starts a window) admits A's three and denies B.
	sc := Scenario{Name: "hand", Defaults: Params{Duration: 4 * time.Second}, Events: func(uint64, Params) []Event {
		return []Event{{At: 0, Caller: "A"}, {At: time.Second, Caller: "A"}, {At: 2 * time.Second, Caller: "A"}, {At: 3 * time.Second, Caller: "B"}}
	}}
	fw, err := CompileStrategy(StrategySource{Name: "fw", Policy: "schema:\n  caller: {limits: [{algorithm: fixed_window, limit: 3, window: 10s}]}\n"})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := CompileStrategy(StrategySource{Name: "gate", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: gate, interval: 1h}]}\n"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), sc, 1, Params{}, []Strategy{fw, gate}, Options{Slice: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// fw: admitted (3, 0): Jain 3²/(2·9) = 0.5, A took everything.
	if s := res.Strategies[0].Summary; s.Offered != 4 || s.Admitted != 3 || s.MaxInWindow["10s"] != 3 || s.Fairness != 0.5 || s.GreediestShare != 1 || s.GreediestCaller != "A" {
		t.Errorf("fw summary %+v", s)
	}
	// gate: once each: (1, 1): Jain 1, A (first in order) half.
	if s := res.Strategies[1].Summary; s.Admitted != 2 || s.MaxInWindow["1h0m0s"] != 2 || s.Fairness != 1 || s.GreediestShare != 0.5 {
		t.Errorf("gate summary %+v", s)
	}
	var b bytes.Buffer
	writeCSV(&b, res)
	want := "t_ms,strategy,offered,admitted,in_flight\n0,fw,2,2,1\n0,gate,2,1,1\n2000,fw,2,1,1\n2000,gate,2,1,1\n"
	if b.String() != want {
		t.Errorf("series:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestReport writes every output of the zoo; the PNG decodes at its size,
// and report.html, opened in headless Chromium, shows the chart and the
// table with no console errors. The screenshot is left in the test's
// output directory (SIM_REPORT_DIR, when set, keeps it).
func TestReport(t *testing.T) {
	res, err := Run(context.Background(), Scenarios["zoo"], 1, Params{Duration: time.Minute}, zooStrategies(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("SIM_REPORT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := WriteDir(dir, res, Scenarios["zoo"].Description); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() != chartHeight(len(res.Strategies)) {
		t.Errorf("chart.png is %dx%d, want %dx%d", b.Dx(), b.Dy(), chartWidth, chartHeight(len(res.Strategies)))
	}

	report := "file://" + filepath.Join(dir, "report.html")
	chrome := func(args ...string) (string, string) { return proxytest.Chromium(t, report, args...) }
	dom, logs := chrome("--dump-dom")
	for _, want := range []string{"<svg", `<table id="summary">`, "gate per caller", "shared window", "<td>both</td>",
		`<div class="chart" id="callers"><svg`, `<ul id="reading">`, "slow callers", "fast callers",
		`<td class="limits"><code>caller/*: {"algorithm":"gate"`, "<th>most in flight</th>", "requests in flight"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Failed to load") || strings.Contains(line, "Uncaught") {
			t.Errorf("console: %s", line)
		}
	}
	shot := filepath.Join(dir, "screenshot.png")
	chrome("--window-size=1300,1000", "--screenshot="+shot)
	f, err = os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() != 1300 {
		t.Fatalf("screenshot: %v", err)
	}
}

func TestTraceScenario(t *testing.T) {
	trace := `{"t_ns": 1000000000, "key": "a", "limit": {"algorithm": "gate", "interval": "1s"}}
{"t_ns": 1500000000, "key": "b", "cost": 2}
{"t_ns": 3000000000, "path": ["user", "c"]}
`
	sc, err := TraceScenario("t.jsonl", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	ev := sc.Events(0, sc.Defaults)
	if len(ev) != 3 || ev[0].At != 0 || ev[1].At != 500*time.Millisecond || ev[1].Cost != 2 || ev[2].Caller != "c" || sc.Defaults.Duration <= 2*time.Second {
		t.Errorf("events %+v, duration %v", ev, sc.Defaults.Duration)
	}
	if _, err := TraceScenario("bad", strings.NewReader(`{"t_ns": 2}`+"\n"+`{"t_ns": 1, "key": "a"}`)); err == nil {
		t.Error("a trace without a key was accepted")
	}
}

// BenchmarkRun: simulated decisions per second in virtual time, the zoo's
// three strategies on the memory store.
func BenchmarkRun(b *testing.B) {
	strategies := zooStrategies(b)
	sc := Scenarios["zoo"]
	events := len(sc.Events(1, Params{Duration: time.Minute, Callers: 200}))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Run(context.Background(), sc, 1, Params{Duration: time.Minute}, strategies, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	decisions := float64(b.N) * float64(events*len(strategies))
	b.ReportMetric(decisions/b.Elapsed().Seconds(), "decisions/s")
}

// TestWindowsOfEveryKind: the summary measures the most admitted in a
// window of each limit's length, for every algorithm (algo's checklist
// for a new algorithm: windows reads every duration a Spec holds).
func TestWindowsOfEveryKind(t *testing.T) {
	for _, k := range algo.Kinds() {
		spec, err := json.Marshal(k.Example().Spec())
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse("t.yaml", []byte("schema:\n  a: {limits: ["+string(spec)+"]}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if w := windows(p); len(w) == 0 {
			t.Errorf("%v: no window of the limit %s", k, spec)
		}
	}
}

// TestRefusesAPolicyThatMatchesNothing: a strategy whose policy limits
// none of the scenario's paths (caller/c, or a path of its own with a
// "*") is refused with why, instead of admitting 100% without a word; one
// that limits api/* takes api/c.
func TestRefusesAPolicyThatMatchesNothing(t *testing.T) {
	keys, err := CompileStrategy(StrategySource{Name: "api keys", Policy: "schema:\n  api:\n    children:\n      \"*\": {limits: [1, 1, 60]}\n"})
	if err != nil || strings.Join(keys.Path, "/") != "api/{caller}" {
		t.Fatalf("api/*: path %v, %v", keys.Path, err)
	}
	other, err := CompileStrategy(StrategySource{Name: "api keys", Policy: "schema:\n  api:\n    children:\n      admin: {limits: [1, 1, 60]}\n"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Scenarios["steady"], 1, Params{}, []Strategy{other}, Options{})
	if err == nil || !strings.Contains(err.Error(), `strategy "api keys" limits none of the scenario's requests`) {
		t.Fatalf("Run: %v", err)
	}
}

// TestInFlightByHand: requests that run 1s each, against two slots per
// caller and against a rate of 2 per second. Caller A asks three times at
// 0, again at 1s (when the first two end) and at 1.5s; the slots admit 2,
// then 2 (the two freed at 1s... and so on), never more than 2 at once;
// the rate admits 2 a second whatever runs.
func TestInFlightByHand(t *testing.T) {
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	sc := Scenario{Name: "hand", Defaults: Params{Duration: 3 * time.Second, RunFor: time.Second}, Events: func(uint64, Params) []Event {
		return []Event{{At: 0, Caller: "A"}, {At: 0, Caller: "A"}, {At: 0, Caller: "A"},
			{At: at(1000), Caller: "A"}, {At: at(1000), Caller: "A"}, {At: at(1500), Caller: "A"}, {At: at(2000), Caller: "A"}}
	}}
	slots, err := LimitStrategy("slots", algo.Concurrency{Count: 2, HoldFor: time.Minute}, true)
	if err != nil {
		t.Fatal(err)
	}
	rate, err := LimitStrategy("rate", algo.FixedWindow{Count: 2, Window: time.Second}, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), sc, 1, Params{}, []Strategy{slots, rate}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// slots: 0s: 2 of 3; 1s: the two end, 2 of 2; 1.5s: full, denied;
	// 2s: the two end, 1.
	if s := res.Strategies[0]; s.Summary.Admitted != 5 || s.Summary.MaxInFlight != 2 || fmt.Sprint(s.InFlight) != "[2 2 1]" {
		t.Errorf("slots: admitted %d, most in flight %d, series %v", s.Summary.Admitted, s.Summary.MaxInFlight, s.InFlight)
	}
	// rate: 2 a second: 0s 2, 1s 2, 1.5s denied, 2s 1; in flight as many.
	if s := res.Strategies[1]; s.Summary.Admitted != 5 || s.Summary.MaxInFlight != 2 {
		t.Errorf("rate: admitted %d, most in flight %d, series %v", s.Summary.Admitted, s.Summary.MaxInFlight, s.InFlight)
	}
	// Longer requests: a rate lets work pile up, slots do not.
	res, err = Run(context.Background(), sc, 1, Params{RunFor: 2500 * time.Millisecond}, []Strategy{slots, rate}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Strategies[0]; s.Summary.Admitted != 2 || s.Summary.MaxInFlight != 2 {
		t.Errorf("slots, 2.5s requests: admitted %d, most in flight %d", s.Summary.Admitted, s.Summary.MaxInFlight)
	}
	if s := res.Strategies[1]; s.Summary.Admitted != 5 || s.Summary.MaxInFlight != 5 {
		t.Errorf("rate, 2.5s requests: admitted %d, most in flight %d", s.Summary.Admitted, s.Summary.MaxInFlight)
	}
}

// TestBruteForceScenario: the guesser against 5 tries a minute, without
// and with a block. Without, it gets 5 a minute: 50 in 10 minutes. With a
// block of 1m, twice as long each time: 5 at 0s, blocked at 1s to 61s; 5
// at 61s, blocked at 62s for 2m to 182s; 5 at 182s, blocked 4m to 423s; 5
// at 423s, blocked 8m past the end: 20. The users get the same either
// way.
func TestBruteForceScenario(t *testing.T) {
	sc := Scenarios["bruteforce"]
	var strategies []Strategy
	for _, src := range sc.Strategies {
		s, err := CompileStrategy(src)
		if err != nil {
			t.Fatal(err)
		}
		strategies = append(strategies, s)
	}
	res, err := Run(context.Background(), sc, 1, Params{}, strategies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain, blocking := res.Strategies[0], res.Strategies[1]
	if a, b := plain.perCaller["attacker"][1], blocking.perCaller["attacker"][1]; a != 50 || b != 20 {
		t.Errorf("the guesser got %d tries without a block, %d with one; want 50 and 20", a, b)
	}
	if u, v := plain.Summary.Admitted-plain.perCaller["attacker"][1], blocking.Summary.Admitted-blocking.perCaller["attacker"][1]; u != v || u == 0 {
		t.Errorf("the users got %d without a block, %d with one", u, v)
	}
}

// TestRunBounds: Params, slices and scenarios beyond their bounds are
// refused before anything runs (a rate of 1e12, a NaN rate or a 1ns slice
// ran out of memory or never ended; a negative value quietly took the
// scenario's default).
func TestRunBounds(t *testing.T) {
	strategies := zooStrategies(t)
	for _, c := range []struct {
		p     Params
		slice time.Duration
		want  string
	}{
		{Params{Duration: -time.Second}, 0, "duration -1s"},
		{Params{Duration: 25 * time.Hour}, 0, "duration 25h"},
		{Params{Rate: -1}, 0, "rate -1"},
		{Params{Rate: math.NaN()}, 0, "rate NaN"},
		{Params{Rate: math.Inf(1)}, 0, "rate +Inf"},
		{Params{Rate: 1e12}, 0, "rate 1e+12"},
		{Params{Callers: -2}, 0, "-2 callers"},
		{Params{Callers: maxCallers + 1}, 0, "1000001 callers"},
		{Params{RunFor: -time.Second}, 0, "hold -1s"},
		{Params{}, -time.Second, "slice -1s is negative"},
		{Params{}, time.Nanosecond, "more than 100000 slices"},
		{Params{Rate: maxRate, Duration: time.Minute}, 0, "fires more than 5000000 requests"},
	} {
		sc := Scenarios["zoo"]
		if c.p.Rate != 0 {
			sc = Scenarios["steady"]
		}
		_, err := Run(context.Background(), sc, 1, c.p, strategies, Options{Slice: c.slice})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v, slice %v: %v, want %q", c.p, c.slice, err, c.want)
		}
	}
}
