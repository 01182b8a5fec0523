package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store"
)

// TestServiceDocListsEverything: docs/service.md's endpoints table names
// every path Handler routes and nothing else, and its metrics table every
// metric the server registers and nothing else. The server's lists are
// read from its source: a route's pattern (expanded over the range loop
// that makes the admin changes) and every "sluice_*" string.
func TestServiceDocListsEverything(t *testing.T) {
	page, err := os.ReadFile("../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	section := func(title string) string {
		_, rest, ok := strings.Cut(string(page), title)
		if !ok {
			t.Fatalf("docs/service.md has no %q", title)
		}
		body, _, _ := strings.Cut(rest, "\n## ")
		return body
	}
	// The endpoints table is the page's first table: the paths of its first column.
	var docPaths []string
	table, _, _ := strings.Cut(string(page), "\n\n## ")
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(row, " | ")
		if !strings.HasPrefix(row, "| ") || len(cells) < 2 {
			continue
		}
		for _, m := range regexp.MustCompile("`(?:[A-Z]+ )?(/[^`]*)`").FindAllStringSubmatch(cells[0], -1) {
			docPaths = append(docPaths, m[1])
		}
	}
	var docMetrics []string
	for _, m := range regexp.MustCompile("`(sluice_[a-z0-9_]+)").FindAllStringSubmatch(section("\n## Metrics\n"), -1) {
		docMetrics = append(docMetrics, m[1])
	}

	routes, metrics := serverSource(t)
	same(t, "endpoint paths", docPaths, routes)
	same(t, "metrics", docMetrics, metrics)

	// Its bounds are the ones the server enforces.
	bounds := map[string]int64{
		"a request's body":                           maxBodyBytes,
		"a path's segments":                          maxPathSegments,
		"the paths of one check":                     maxPaths,
		"a check's `meta`":                           maxMetaBytes,
		"a key":                                      store.MaxKeyLen,
		"a request line and header fields":           maxHeaderBytes,
		"a gRPC request's descriptors":               maxDescriptors,
		"a gRPC descriptor's entries":                maxEntries,
		"a proxied request's URI at forward-auth":    maxForwardURI,
		"a proxied request's method at forward-auth": maxForwardMethod,
		"a queue entry's `Idempotency-Key`":          queue.MaxDedupBytes,
		"the holders `/admin/v1/holders` lists":      maxHoldersListed,
		"the estimates one key holds open":           store.MaxOpenTickets,
		"a `settle_id`":                              policy.MaxEstimateID,
	}
	row := regexp.MustCompile("(?m)^\\| ([^|(]+?)(?: \\([^|]*\\))? \\| ([0-9,]+)( KiB)?(?: bytes)? \\|$")
	rows := row.FindAllStringSubmatch(section("\n## Bounds\n"), -1)
	for _, m := range rows {
		want, ok := bounds[m[1]]
		if !ok {
			t.Errorf("docs/service.md states a bound the test does not know: %s", m[1])
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(m[2], ",", ""), 10, 64)
		if m[3] != "" {
			n <<= 10
		}
		if err != nil || n != want {
			t.Errorf("docs/service.md: %s is at most %s%s; the server's bound is %d", m[1], m[2], m[3], want)
		}
		delete(bounds, m[1])
	}
	for what := range bounds {
		t.Errorf("docs/service.md does not state the bound of %s", what)
	}
}

// serverSource returns the paths Handler routes (but "/") and the metric
// names in the package's non-test source.
func serverSource(t *testing.T) (routes, metrics []string) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	metric := regexp.MustCompile(`^sluice_[a-z0-9_]+$`)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ranges := map[string][]string{} // a range loop's value variable: the strings it takes
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.RangeStmt:
				if v, ok := n.Value.(*ast.Ident); ok {
					if lit, ok := n.X.(*ast.CompositeLit); ok {
						for _, e := range lit.Elts {
							ranges[v.Name] = append(ranges[v.Name], unquote(t, e))
						}
					}
				}
			case *ast.BasicLit:
				if s := unquote(t, n); metric.MatchString(s) {
					metrics = append(metrics, s)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") || len(n.Args) != 2 {
					return true
				}
				patterns := []string{unquote(t, n.Args[0])}
				if b, ok := n.Args[0].(*ast.BinaryExpr); ok {
					v, _ := b.Y.(*ast.Ident)
					if v == nil || len(ranges[v.Name]) == 0 {
						t.Fatalf("%s: a route pattern the test cannot read", fset.Position(b.Pos()))
					}
					patterns = nil
					for _, s := range ranges[v.Name] {
						patterns = append(patterns, unquote(t, b.X)+s)
					}
				}
				for _, p := range patterns {
					if _, path, ok := strings.Cut(p, " "); ok {
						p = path
					}
					if p != "/" {
						routes = append(routes, p)
					}
				}
			}
			return true
		})
	}
	return routes, metrics
}

// unquote is the string a literal expression stands for, or "".
func unquote(t *testing.T, e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// same fails unless doc and source hold the same strings, repeats aside.
func same(t *testing.T, what string, doc, source []string) {
	t.Helper()
	slices.Sort(doc)
	slices.Sort(source)
	doc, source = slices.Compact(doc), slices.Compact(source)
	if len(source) == 0 {
		t.Fatalf("found no %s in the source", what)
	}
	for _, s := range source {
		if _, ok := slices.BinarySearch(doc, s); !ok {
			t.Errorf("docs/service.md does not list %s %s", what, s)
		}
	}
	for _, d := range doc {
		if _, ok := slices.BinarySearch(source, d); !ok {
			t.Errorf("docs/service.md lists %s %s, which the server does not have", what, d)
		}
	}
}
