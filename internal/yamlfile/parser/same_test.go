package parser_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	upstream "github.com/goccy/go-yaml/parser"

	"github.com/sluicehq/sluice/internal/yamlfile/parser"
)

// TestSameAsUpstream: the fork parses every YAML file of the repository,
// and mappings of many keys in each style, to the tree the library does.
func TestSameAsUpstream(t *testing.T) {
	var sources []string
	err := filepath.WalkDir("../../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d YAML files", len(sources))
	if len(sources) < 20 {
		t.Fatalf("only %d YAML files found", len(sources))
	}
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "k%d:\n  v: %d\n  w: [%d, {x: y}]\n", i, i, i)
	}
	sources = append(sources, b.String(), "a: {\nb: 1\n}\nc: 2\n", "- a: 1\n  b: 2\n- c: 3\n", "[\na: 1\n]\n")
	for i, src := range sources {
		want, werr := upstream.ParseBytes([]byte(src), 0, upstream.AllowDuplicateMapKey())
		got, gerr := parser.ParseBytes([]byte(src), 0)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Errorf("source %d: error %v, the library's %v", i, gerr, werr)
			continue
		}
		if werr == nil && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("source %d: the fork parses\n%v\nthe library\n%v", i, got, want)
		}
	}
}
