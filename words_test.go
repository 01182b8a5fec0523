package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goFile is what TestLayers and TestOneWordPerIdea know of a non-test Go
// file: its path, the module's packages it imports, its identifiers, and
// whether it is concurrency code (it names a permit, a holder, a slot
// operation or the concurrency limit itself).
type goFile struct {
	path        string
	imports     []string // relative to the module's root: "store", "." for the root
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
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case p == module:
				g.imports = append(g.imports, ".")
			case strings.HasPrefix(p, module+"/"):
				g.imports = append(g.imports, strings.TrimPrefix(p, module+"/"))
			}
		}
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

// idWord matches the words of an identifier: hashSlotGroups is hash, Slot,
// Groups; ShareThreshold is Share, Threshold.
var idWord = regexp.MustCompile(`[A-Z]+[a-z0-9]*|[a-z0-9]+`)

// says reports whether a word of id begins with word (slot: slot, slots;
// not release for lease, nor threshold for hold), and whether the word
// before it is prev.
func says(id, word string) (ok bool, prev string) {
	ws := idWord.FindAllString(id, -1)
	for i, w := range ws {
		if strings.HasPrefix(strings.ToLower(w), word) {
			if i > 0 {
				prev = strings.ToLower(ws[i-1])
			}
			return true, prev
		}
	}
	return false, ""
}

// settles reports whether f is estimate and settle code: an identifier of
// it says settle.
func (f goFile) settles() bool {
	for id := range f.ids {
		if ok, _ := says(id, "settle"); ok {
			return true
		}
	}
	return false
}

// leasedQuota names what a store does with leased quota.
var leasedQuota = []string{"Lease", "Leaser", "LeaseFor", "MaxLease", "LeaseStats", "Leased", "Granter", "LeaseRequests"}

// TestOneWordPerIdea keeps the words of docs/architecture.md's table out of
// the identifiers of other meanings, where a file's own identifiers tell
// which meaning it is about; and a slot's hold out of what lease says.
func TestOneWordPerIdea(t *testing.T) {
	files := goFiles(t)
	if len(files) < 100 {
		t.Fatalf("only %d files: is the walk right?", len(files))
	}
	rules := []struct {
		word string                           // a word of an identifier begins with it
		ok   func(f goFile, prev string) bool // whether f may say it, after the word prev
		want string                           // what the table says
	}{
		{"slot", func(f goFile, prev string) bool {
			return prev == "hash" || f.concurrency && !f.ids["HashSlot"]
		}, "a slot is a unit of a concurrency limit, in concurrency code; a Redis Cluster slot is a hashSlot"},
		{"hold", func(f goFile, _ string) bool {
			return f.concurrency
		}, "a hold is how long slots are held (hold_for), said only in concurrency code"},
		{"acquire", func(f goFile, _ string) bool {
			return f.concurrency
		}, "acquire takes slots, in concurrency code"},
		{"batch", func(f goFile, _ string) bool {
			return f.ids["DecideAll"] || f.ids["InBatch"]
		}, "a batch is the requests of one all-or-nothing DecideAll; several callers' decisions in one script call are coalesced"},
		{"coalesc", func(f goFile, _ string) bool {
			return strings.HasPrefix(f.path, "store/redis/")
		}, "coalescing is the Redis store's: several callers' decisions in one script call"},
		{"ticket", func(f goFile, _ string) bool {
			return strings.HasPrefix(f.path, "store/") || f.settles()
		}, "a ticket is what a store keeps of an estimate until it is settled (store.Settler)"},
		{"estimat", func(f goFile, _ string) bool {
			return f.settles() && !strings.HasPrefix(f.path, "store/")
		}, "an estimate is a cost admitted before it is known and settled after; what a store keeps of it is a ticket"},
	}
	lease := regexp.MustCompile(`\blease`) // not release
	for _, f := range files {
		// A slot's hold is no lease: concurrency code that does not name
		// leased quota says lease nowhere, not even in its comments.
		quota := false
		for _, id := range leasedQuota {
			quota = quota || f.ids[id]
		}
		if f.concurrency && !quota {
			for id := range f.ids {
				if ok, _ := says(id, "lease"); ok {
					t.Errorf("%s: %s says \"lease\" in concurrency code: a slot is held (hold_for), a lease is leased quota", f.path, id)
				}
			}
			if m := lease.FindAllString(f.comments, -1); len(m) > 0 {
				t.Errorf("%s: its comments say \"lease\" %d times in concurrency code: a slot is held (hold_for), a lease is leased quota", f.path, len(m))
			}
		}
		for id := range f.ids {
			// settle_id is a ticket's id on the wire, and a ticket in Go.
			if strings.Contains(strings.ToLower(id), "settleid") && !strings.HasPrefix(f.path, "server/") {
				t.Errorf("%s: %s says settle_id, the wire's name: a ticket in Go", f.path, id)
			}
			for _, r := range rules {
				if ok, prev := says(id, r.word); ok && !r.ok(f, prev) {
					t.Errorf("%s: %s says %q: %s", f.path, id, r.word, r.want)
				}
			}
		}
	}
}
