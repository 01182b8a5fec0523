package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// layerRow is a row of docs/architecture.md's layer table:
// "| 3 | `store`, `queue/backend` | why |".
var layerRow = regexp.MustCompile("^\\| (\\d+) \\| (`[^|]*`) \\|")

// layers reads docs/architecture.md's table: each package pattern ("store",
// "server/...", "." for the root) and its layer.
func layers(t *testing.T) map[string]int {
	t.Helper()
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	l := map[string]int{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := layerRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range strings.Split(m[2], ",") {
			l[strings.Trim(strings.TrimSpace(p), "`")] = n
		}
	}
	if len(l) == 0 {
		t.Fatal("docs/architecture.md has no layer table")
	}
	return l
}

// layerOf returns the layer of the package at dir (relative to the
// module's root, "." for the root) by its most specific pattern, or -1.
func layerOf(l map[string]int, dir string) int {
	for p := dir; ; p = filepath.Dir(p) {
		if n, ok := l[p]; ok && p == dir {
			return n
		}
		if n, ok := l[p+"/..."]; ok {
			return n
		}
		if p == "." || p == "/" {
			return -1
		}
	}
}

// TestLayers fails on any import, in a non-test Go file of the module,
// from a package to one of a higher layer in docs/architecture.md's table,
// and on a package the table does not place.
func TestLayers(t *testing.T) {
	l := layers(t)
	checked := 0
	for _, f := range goFiles(t) {
		dir := filepath.Dir(f.path)
		from := layerOf(l, dir)
		if from < 0 {
			t.Errorf("%s: package %s has no layer in docs/architecture.md's table", f.path, dir)
			continue
		}
		for _, to := range f.imports {
			checked++
			switch n := layerOf(l, to); {
			case n < 0:
				t.Errorf("%s imports %s, which has no layer in docs/architecture.md's table", f.path, to)
			case n > from:
				t.Errorf("%s imports %s (layer %d, above %s's %d)", f.path, to, n, dir, from)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d imports of the module: is the walk right?", checked)
	}
}
