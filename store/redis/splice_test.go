package redis

import (
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestScriptsAreOnlyEmbeddedText: every script the store composes, for
// every set of kinds, is lines of its embedded .lua files and dispatch
// tables of constant names: nothing a caller sends is spliced into script
// text (keys and values reach scripts only as KEYS and ARGV).
func TestScriptsAreOnlyEmbeddedText(t *testing.T) {
	embedded := map[string]bool{}
	err := fs.WalkDir(scripts, "scripts", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := scripts.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			embedded[l] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile(`^local (check|commit|undo|build) = \{([a-z] = [a-z]_(check|commit|undo|kind), )*\}$`)
	for _, d := range []*driver{decideDriver, coalesceDriver, refundDriver} {
		for set := kindSet(0); set < 1<<len(bindings); set++ {
			for _, l := range strings.Split(d.compose(set), "\n") {
				if !embedded[l] && !table.MatchString(l) {
					t.Fatalf("%s, kinds %b: line %q is neither embedded text nor a dispatch table", d.file, set, l)
				}
			}
		}
	}
}

// TestLuaScriptsComeFromEmbeddedFiles: the store makes its own Lua
// scripts in two places only, both in bindings.go and from embedded text:
// the drivers' compositions and embeddedScript. The third is the
// operator's own script file (LoadScript).
func TestLuaScriptsComeFromEmbeddedFiles(t *testing.T) {
	want := map[string]string{
		"bindings.go":   "rueidis.NewLuaScript(d.compose(set))",
		"bindings.go#2": "rueidis.NewLuaScript(b.String())", // embeddedScript
		"userscript.go": "rueidis.NewLuaScript(string(src))",
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i, call := range regexp.MustCompile(`\w+\.NewLuaScript\([^\n]*\)`).FindAllString(string(b), -1) {
			name := e.Name()
			if i > 0 {
				name += "#" + strconv.Itoa(i+1)
			}
			if want[name] != call {
				t.Errorf("%s: %s: a script made from something else than embedded text", e.Name(), call)
			}
		}
	}
}
