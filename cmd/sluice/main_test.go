package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLayoutNamesEveryCommand: the layouts of the README and
// docs/architecture.md name every subcommand on their cmd/sluice/ lines.
func TestLayoutNamesEveryCommand(t *testing.T) {
	for _, page := range []string{"../../README.md", "../../docs/architecture.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^cmd/sluice/ +the (?:one )?binary: (.*(?:\n {5,}.*)*)`).FindSubmatch(text)
		if m == nil {
			t.Fatalf("no cmd/sluice/ line in %s's layout", page)
		}
		named := strings.FieldsFunc(string(m[1]), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })
		for name := range commands {
			if !slices.Contains(named, name) {
				t.Errorf("%s's layout does not name sluice %s", page, name)
			}
		}
	}
}

// TestHelpExitsZero: -h and --help print usage and exit 0 on every
// subcommand and on sluice itself; version and --version print the build.
func TestHelpExitsZero(t *testing.T) {
	for name := range commands {
		for _, flag := range []string{"-h", "--help"} {
			out, err := exec.Command(sluiceBin, name, flag).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "usage: sluice "+name) {
				t.Errorf("sluice %s %s: %v\n%s", name, flag, err, out)
			}
		}
	}
	if out, err := exec.Command(sluiceBin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "commands:") {
		t.Errorf("sluice --help: %v %s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(sluiceBin, args...).CombinedOutput()
		// The release (CHANGELOG.md's top entry); built from a git clone,
		// the binary adds its commit (12 hex digits, +dirty when changed)
		// and the commit's time, which Go records nowhere else (a git
		// worktree, a tarball).
		want := `^sluice ` + regexp.QuoteMeta(changelogTop(t)) + ` go1\.`
		if info, _ := exec.Command("go", "version", "-m", sluiceBin).Output(); strings.Contains(string(info), "vcs.revision=") {
			want = `^sluice ` + regexp.QuoteMeta(changelogTop(t)) + ` [0-9a-f]{12}(\+dirty)? \d{4}-\d\d-\d\dT\S+ go1\.`
		}
		if err != nil || !regexp.MustCompile(want).Match(out) {
			t.Errorf("sluice %v: %v %q, want %s", args, err, out, want)
		}
	}
	if err := exec.Command(sluiceBin, "replay", "--no-such-flag").Run(); err == nil {
		t.Error("a bad flag exited 0")
	}
}

// changelogTop returns the version of CHANGELOG.md's first entry, a
// heading "## v1.2.3 (date)".
func changelogTop(t *testing.T) string {
	data, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\b`).FindSubmatch(data)
	if m == nil {
		t.Fatal("CHANGELOG.md has no entry such as ## v0.1.0")
	}
	return string(m[1])
}

// TestSim runs sluice sim with limit and policy strategies and checks what
// it writes.
func TestSim(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "both.yaml")
	if err := os.WriteFile(pol, []byte("schema:\n  caller:\n    limits: [{algorithm: fixed_window, limit: 50, window: 10s}]\n    children:\n      \"*\": {limits: [[1, 1, 5]]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command(sluiceBin, "sim", "--scenario", "greedy", "--duration", "30s", "--seed", "3",
		"--limit", `each=each:{"algorithm":"gcra","burst":2,"count":1,"period":"1s"}`,
		"--limit", `shared=shared:{"algorithm":"fixed_window","limit":100,"window":"10s"}`,
		"--policy", "both="+pol, "--out", out)
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{"each ", "shared ", "both ", "wrote " + filepath.Join(out, "report.html")} {
		if !strings.Contains(string(text), want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(string(text), "\r") {
		t.Errorf("a progress bar in output that is not a terminal:\n%q", text)
	}
	for _, f := range []string{"series.csv", "summary.json", "chart.png", "chart.svg", "callers.png", "report.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The "wrote" line and --out's usage name every file written.
	wrote := regexp.MustCompile(`(?m)^wrote .*$`).FindString(string(text))
	usage, _ := exec.Command(sluiceBin, "sim", "-h").CombinedOutput()
	files, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.Contains(wrote, f.Name()) {
			t.Errorf("the line %q does not name %s", wrote, f.Name())
		}
		if !strings.Contains(string(usage), f.Name()) {
			t.Errorf("sluice sim -h does not name %s", f.Name())
		}
	}
	var sum struct {
		Strategies []struct {
			Name     string
			Offered  int64
			Admitted int64
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Strategies) != 3 || sum.Strategies[1].Admitted != 300 {
		t.Errorf("summary %s: %v (want the shared window to admit 100 per 10 s: 300)", b, err)
	}
	if out, err := exec.Command(sluiceBin, "sim", "--limit", "nonsense").CombinedOutput(); err == nil || !strings.Contains(string(out), "NAME=each:SPEC") {
		t.Errorf("a bad --limit: %v %s", err, out)
	}
}

// TestSimRealTimeOnRedis replays a short trace in real time against Redis,
// each strategy under its own key prefix.
func TestSimRealTimeOnRedis(t *testing.T) {
	rd := redistest.Start(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	var b strings.Builder
	for i := range 6 {
		fmt.Fprintf(&b, `{"t_ns": %d, "key": "k%d"}`+"\n", 1_800_000_000_000_000_000+int64(i)*50_000_000, i%2)
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sluiceBin, "sim", "--trace", trace, "--store", rd.URL(),
		"--limit", `gate=each:{"algorithm":"gate","interval":"1h"}`,
		"--limit", `two=shared:{"algorithm":"fixed_window","limit":2,"window":"1h"}`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`gate\s+offered\s+6\s+admitted\s+2\b`).Match(out) || !regexp.MustCompile(`two\s+offered\s+6\s+admitted\s+2\b`).Match(out) {
		t.Errorf("output:\n%s", out)
	}
	if v, err := rd.Do("EXISTS", "sluice:sim:gate:{caller:k0}%:gate"); err != nil || v != "1" { // a gate's state
		t.Errorf("the gate strategy's key under its prefix: %q %v", v, err)
	}
}

// TestMistakesNameTheFix: a misspelt flag or command gets one line that
// says what was meant (not the whole usage, which buried it); `sluice help
// CMD` and `sluice queue dead -h` print that command's usage.
func TestMistakesNameTheFix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--polciy", "x"}, 2, "flag provided but not defined: -polciy (did you mean --policy?); sluice serve -h lists its flags"},
		{[]string{"block", "--fr", "1h", "a"}, 2, "(did you mean --for?)"},
		{[]string{"server"}, 2, `unknown command "server" (did you mean serve?)`},
		{[]string{"queue", "wrk", "q"}, 2, `unknown command "wrk" (did you mean work?)`},
		{[]string{"help", "serve"}, 0, "usage: sluice serve"},
		{[]string{"queue", "dead", "-h"}, 0, "usage: sluice queue"},
	} {
		code, _, stderr := runSluice(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("sluice %v: exit %d %q, want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
		if tc.code == 2 && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("sluice %v: %d lines, want one:\n%s", tc.args, strings.Count(stderr, "\n"), stderr)
		}
	}
}

// TestSimRunsTheServicePolicy: `sluice sim` runs the policy `sluice serve`
// serves (the bundled example) as it is: its callers take the path of its
// first limited node with a "*" (user/c), and the report opens in headless
// chromium. SLUICE_SCREENSHOT=FILE keeps a screenshot of it to look at.
func TestSimRunsTheServicePolicy(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(sluiceBin, "sim", "--scenario", "steady", "--duration", "60s", "--policy", "example=limits.example.yaml",
		"--limit", `gcra=each:{"algorithm":"gcra","burst":9,"count":20,"period":"1m"}`, "--out", out)
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !strings.Contains(string(text), "strategy example: a request by caller c is the path user/c") {
		t.Errorf("sim does not say the path it took:\n%s", text)
	}
	var sum struct {
		Strategies []struct {
			Name              string
			Offered, Admitted int64
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Strategies) != 2 || sum.Strategies[0].Admitted != sum.Strategies[1].Admitted || sum.Strategies[0].Admitted >= sum.Strategies[0].Offered {
		t.Errorf("summary %s: %v (want the example's user/* level, gcra 10 at once then 20 a minute, to admit as the same limit alone does)", b, err)
	}
	if _, err := exec.Command(sluiceBin, "sim", "--scenario", "steady", "--policy", "x=limits.example.yaml", "--path", "user/alex").CombinedOutput(); err == nil {
		t.Error("a --path without {caller} was taken")
	}
	report := "file://" + filepath.Join(out, "report.html")
	dom, logs := proxytest.Chromium(t, report, "--dump-dom")
	for _, want := range []string{`<table id="summary">`, "<td>example</td>", `<ul id="reading">`, "Every strategy admitted the same, as evenly", "<svg"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered report lacks %q", want)
		}
	}
	if strings.Contains(dom, "A limit of each caller's own shares capacity evenly") {
		t.Error("the report compares per-caller and shared limits where every strategy is per-caller")
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("console: %s", line)
		}
	}
	if shot := os.Getenv("SLUICE_SCREENSHOT"); shot != "" {
		proxytest.Chromium(t, report, "--window-size=1300,1400", "--screenshot="+shot)
	}
}
