package sluice_test

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

func TestKeyIsInjective(t *testing.T) {
	lists := [][]string{
		{"user", "alex", "trade"},
		{"user", "alex:trade"},
		{"user:alex", "trade"},
		{"user", "{alex}", "trade"},
		{"user", "%7Balex%7D", "trade"},
		{"user", "alex#0"},
		{"user", "alex", ""},
		{"user", "alex"},
		{"user", "alex%3Atrade"},
	}
	seen := map[string][]string{}
	for _, parts := range lists {
		k := sluice.Key(parts...)
		if prev, dup := seen[k]; dup {
			t.Errorf("Key(%q) = Key(%q) = %q", parts, prev, k)
		}
		seen[k] = parts
	}
	if got := sluice.Key("user", "{alex}:x#1%"); got != "user:%7Balex%7D%3Ax%231%25" {
		t.Errorf("Key escaped to %q", got)
	}
	if s := "plain-id_42"; sluice.Key(s) != s {
		t.Errorf("Key changed %q", s)
	}
}

// docPages returns the README and every page of docs/, joined: the text
// whose snippets must be code the tests run.
func docPages(t *testing.T) []byte {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md", "docs/proxies/README.md"}, pages...)
	var all []byte
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), '\n')
	}
	return all
}

// TestReadmeGoBlocks: every Go block of the README and the docs pages is
// code that an example or test runs.
func TestReadmeGoBlocks(t *testing.T) {
	readme := docPages(t)
	var files [][]string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "examples/") && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files = append(files, trimmedLines(string(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go blocks in the README")
	}
	for _, b := range blocks {
		want := trimmedLines(b[1])
		found := false
		for _, f := range files {
			if containsRun(f, want) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README Go block is in no example:\n%s", b[1])
		}
	}
}

// trimmedLines returns the non-empty lines of s, trimmed of spaces.
func trimmedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether want occurs in have as consecutive lines.
func containsRun(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// TestReadmePolicies: every YAML block of the README and the docs pages
// that holds a schema is a valid policy.
func TestReadmePolicies(t *testing.T) {
	readme := docPages(t)
	n := 0
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if !strings.Contains(b[1], "schema:") {
			continue
		}
		n++
		if _, err := policy.Parse("README.md", []byte(b[1])); err != nil {
			t.Errorf("README policy:\n%s\n%v", b[1], err)
		}
	}
	if n == 0 {
		t.Error("no policy in the README")
	}
}

// FuzzKeyInjective: two different part lists never give the same key.
func FuzzKeyInjective(f *testing.F) {
	f.Add("user", "alex:trade", "user:alex", "trade", 2)
	f.Add("a#0", "", "a", "#0", 1)
	f.Add("{x}", "%7Bx%7D", "%", "25", 0)
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string, shape int) {
		a, b := []string{a1, a2}, []string{b1, b2}
		switch shape % 3 {
		case 1:
			a = a[:1]
		case 2:
			b = b[:1]
		}
		if !slices.Equal(a, b) && sluice.Key(a...) == sluice.Key(b...) {
			t.Fatalf("Key(%q) = Key(%q) = %q", a, b, sluice.Key(a...))
		}
	})
}

// TestBounds: a limit or a cost beyond what both stores count exactly is
// refused with a clear error, before any store sees it.
func TestBounds(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	_, err := algo.Compile(algo.FixedWindow{Count: math.MaxInt64, Window: time.Second})
	if !errors.Is(err, algo.ErrInvalid) || !strings.Contains(err.Error(), "exceeds 9007199254740991") {
		t.Errorf("fixed_window limit 2^63-1: %v", err)
	}
	_, err = st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 1, Window: time.Second}), Cost: algo.MaxCount + 1})
	if !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "exceeds 9007199254740991") {
		t.Errorf("cost 2^53: %v", err)
	}
	if _, err := sluice.NewLimiter(st, algo.FixedWindow{Count: algo.MaxCount + 1, Window: time.Second}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("NewLimiter with a fixed_window limit of 2^53: %v", err)
	}
	if _, err := algo.Compile(algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactLimit + 1, Window: time.Second}}}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("exact sliding_log limit %d: %v", algo.MaxExactLimit+1, err)
	}
	// An exact log writes an entry per action: one decision takes at most
	// algo.MaxExactCost, in Decide, AllowN and DecideAll alike.
	exact := algo.SlidingLog{Limits: []algo.Window{{Count: algo.MaxExactLimit, Window: time.Second}}}
	big := store.Request{Key: "k", Plan: algo.MustCompile(exact), Cost: algo.MaxExactCost + 1}
	if _, err := st.Decide(ctx, big); !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "exceeds 10000") {
		t.Errorf("Decide, exact log, cost %d: %v", big.Cost, err)
	}
	if _, err := st.AllowN(ctx, "k", big.Plan, time.Time{}, big.Cost, nil); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("AllowN, exact log, cost %d: %v", big.Cost, err)
	}
	if _, err := st.DecideAll(ctx, []store.Request{big, {Key: "j", Plan: algo.MustCompile(exact), Cost: 1}}, make([]algo.Result, 2)); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("DecideAll, exact log, cost %d: %v", big.Cost, err)
	}
	if r, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(exact), Cost: 0}); err != nil || r.Remaining != algo.MaxExactLimit {
		t.Errorf("a refused cost took capacity: %+v %v", r, err)
	}
}

// TestStoreBoundary: a store's insides stay in its package. Outside
// store/redis (and internal/redistest, which starts servers for tests,
// and the bench module), no code imports the Redis client or asserts a
// concrete store type: what only some stores can do is a capability in
// package store.
func TestStoreBoundary(t *testing.T) {
	concrete := regexp.MustCompile(`\.\(\*(redis|memory)\.Store\)`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case path == "bench" || path == "store/redis" || path == "internal/redistest" || strings.HasPrefix(d.Name(), ".") && path != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `"github.com/redis/rueidis"`) {
			t.Errorf("%s imports rueidis: only store/redis speaks to Redis", path)
		}
		if m := concrete.Find(b); m != nil {
			t.Errorf("%s asserts a concrete store type (%s): ask for a capability of package store", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadmeGoVersion: the Go the README asks for is go.mod's go line, the
// oldest the module builds with (go vet's stdversion check holds its
// standard library calls to it; the README said 1.26 while go.mod says
// 1.25).
func TestReadmeGoVersion(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (1\.\d+)(\.\d+)?$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	asked := regexp.MustCompile(`\(Go (1\.\d+)[ ;)]`).FindAllSubmatch(readme, -1)
	if len(asked) == 0 {
		t.Fatal("the README names no Go version")
	}
	for _, a := range asked {
		if string(a[1]) != string(m[1]) {
			t.Errorf("the README asks for Go %s, go.mod's go line says %s", a[1], m[1])
		}
	}
}

// TestEveryKindDocumented: the README's table of algorithms has a row
// for every registered kind (algo's checklist for a new algorithm).
func TestEveryKindDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range algo.Kinds() {
		if i := strings.Index(string(readme), "\n| `"+k.String()+"` |"); i < 0 {
			t.Errorf("the README's table of algorithms has no row for %s", k)
		} else if row, _, _ := strings.Cut(string(readme[i+1:]), "\n"); !strings.Contains(row, "q = ") || !strings.Contains(row, "w = ") {
			t.Errorf("the README's row for %s does not give its RateLimit q and w: %s", k, row)
		}
	}
}

// TestLayoutNamesEveryPackage: the README's Layout names every package
// directory of the module (internal/'s are described under internal/).
func TestLayoutNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README has no Layout section")
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(layout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], "/") && !strings.HasPrefix(line, " ") {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || path != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		if dir != "." && !listed[dir] && !strings.Contains("/"+dir, "/internal/") {
			t.Errorf("the README's Layout does not name %s/", dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocLinks: every relative link of the README and the docs pages names
// a file or directory of the repository.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md", "docs/proxies/README.md", "CHANGELOG.md", "BENCHMARKS.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				t.Errorf("%s links to %s, which is not there", p, m[1])
			}
		}
	}
}
