package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goFile is what TestOneWordPerIdea knows of a non-test Go file: its path,
// its identifiers, and whether it is concurrency code (it names a permit,
// a holder, a slot operation or the concurrency limit itself).
type goFile struct {
	path        string
	ids         map[string]bool
	concurrency bool
	comments    string // its comments' text, lower case
}

var concurrencyMark = regexp.MustCompile(`(?i)permit|holder|slotop|^concurrency$|^holdfor$`)

// goFiles parses the module's non-test Go files, but for those under skip.
func goFiles(t *testing.T, skip ...string) []goFile {
	t.Helper()
	var files []goFile
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "." {
				return nil
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			for _, s := range skip {
				if filepath.ToSlash(path) == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		g := goFile{path: filepath.ToSlash(path), ids: map[string]bool{}}
		for _, c := range f.Comments {
			g.comments += strings.ToLower(c.Text())
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				g.ids[id.Name] = true
				g.concurrency = g.concurrency || concurrencyMark.MatchString(id.Name)
			}
			return true
		})
		files = append(files, g)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestOneWordPerIdea keeps the words of docs/architecture.md's table out of
// the identifiers of other meanings, where a file's own identifiers tell
// which meaning it is about.
func TestOneWordPerIdea(t *testing.T) {
	// server/, policy/ and httplimit/ are rewritten in other branches of
	// issue 55 at the time of writing: the lead drops them from here when
	// they land.
	files := goFiles(t, "server", "policy", "httplimit")
	if len(files) < 100 {
		t.Fatalf("only %d files: is the walk right?", len(files))
	}
	rules := []struct {
		word string                    // in an identifier, any case
		ok   func(goFile, string) bool // where the identifier id may say it
		want string                    // what the table says
	}{
		{"slot", func(f goFile, id string) bool {
			if strings.Contains(strings.ToLower(id), "hashslot") {
				return true
			}
			return f.concurrency && !f.ids["HashSlot"]
		}, "a slot is a unit of a concurrency limit, in concurrency code; a Redis Cluster slot is a hashSlot"},
		{"hold", func(f goFile, id string) bool {
			return f.concurrency
		}, "a hold is how long slots are held (hold_for), said only in concurrency code"},
		{"acquire", func(f goFile, id string) bool {
			return f.concurrency
		}, "acquire takes slots, in concurrency code"},
		{"batch", func(f goFile, id string) bool {
			return f.ids["DecideAll"] || f.ids["InBatch"]
		}, "a batch is the requests of one all-or-nothing DecideAll; several callers' decisions in one script call are coalesced"},
		{"coalesc", func(f goFile, id string) bool {
			return strings.HasPrefix(f.path, "store/redis/")
		}, "coalescing is the Redis store's: several callers' decisions in one script call"},
		{"ticket", func(f goFile, id string) bool {
			return strings.HasPrefix(f.path, "store/") || f.ids["Settler"]
		}, "a ticket is what a store keeps of an estimate until it is settled (store.Settler)"},
		{"estimat", func(f goFile, id string) bool {
			return f.ids["Settler"] && !strings.HasPrefix(f.path, "store/")
		}, "an estimate is a cost admitted before it is known and settled after; what a store keeps of it is a ticket"},
		{"settleid", func(f goFile, id string) bool {
			return false
		}, "settle_id is a ticket's id on the wire (server/), a ticket in Go"},
	}
	lease := regexp.MustCompile(`\blease`) // not release
	for _, f := range files {
		// A slot's hold is no lease: concurrency code that does not name
		// leased quota says lease nowhere, not even in its comments.
		if f.concurrency && !f.ids["Leaser"] && !f.ids["Lease"] {
			for id := range f.ids {
				if lease.MatchString(strings.ToLower(id)) {
					t.Errorf("%s: %s says \"lease\" in concurrency code: a slot is held (hold_for), a lease is leased quota", f.path, id)
				}
			}
			if m := lease.FindAllString(f.comments, -1); len(m) > 0 {
				t.Errorf("%s: its comments say \"lease\" %d times in concurrency code: a slot is held (hold_for), a lease is leased quota", f.path, len(m))
			}
		}
		for id := range f.ids {
			lower := strings.ToLower(id)
			for _, r := range rules {
				if strings.Contains(lower, r.word) && !r.ok(f, id) {
					t.Errorf("%s: %s says %q: %s", f.path, id, r.word, r.want)
				}
			}
		}
	}
}
