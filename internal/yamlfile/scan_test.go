package yamlfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/lexer"

	"github.com/sluicehq/sluice/internal/yamlfile/parser"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

type anyList struct {
	X []int `yaml:"x"`
}

// TestBoundsBeforeParse: a text past a bound is refused, at its position,
// before the parser builds anything deeper or larger (issue 54, item 5: a
// sequence nested 30,000 deep in 60 KB took 2.85 GB): more than
// MaxFileBytes or maxTokens tokens before the scanner runs, nesting deeper
// than parser.MaxDepth before the parser goes deeper (the scanner's tokens,
// about 400 bytes each, are all it has made).
func TestBoundsBeforeParse(t *testing.T) {
	deep := "x: " + strings.Repeat("[", 30_000) + strings.Repeat("]", 30_000) + "\n"
	var blockDeep strings.Builder
	for i := range 300 {
		fmt.Fprintf(&blockDeep, "%sa:\n", strings.Repeat(" ", i))
	}
	tokens := "x: [" + strings.Repeat("1,", maxTokens/2) + "1]\n"
	for _, c := range []struct {
		name, src, want string
		maxBytes        uint64
	}{
		{"flow nested 30,000 deep", deep, "f:1:259: YAML syntax: nested deeper than 256", 32 << 20},
		{"block nested 300 deep", blockDeep.String(), "f:257:257: YAML syntax: nested deeper than 256", 8 << 20},
		{"more tokens than maxTokens", tokens, fmt.Sprintf("f:1:1000002: file too large: more than %d tokens", maxTokens), 1 << 20},
		{"larger than MaxFileBytes", "x: [" + strings.Repeat(" ", MaxFileBytes) + "]", "f:1:1: larger than 4 MiB", 1 << 20},
	} {
		data := []byte(c.src)
		var err error
		n := allocated(func() { err = Decode("f", data, &anyList{}) })
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
		if n > c.maxBytes {
			t.Errorf("%s: %d MB allocated before the refusal, want at most %d MB", c.name, n>>20, c.maxBytes>>20)
		}
	}
	// Just inside the bounds is read.
	inside := "x: " + strings.Repeat("[", 255) + strings.Repeat("]", 255) + "\n"
	if err := Decode("f", []byte(inside), &struct {
		X any `yaml:"x"`
	}{}); err != nil && strings.Contains(err.Error(), "deeper") {
		t.Errorf("nested 256 deep: %v", err)
	}
}

// TestParseLinear: the memory a text takes to load grows with its size, not
// its square (issue 54, item 5): a block mapping of n keys took n² (the
// parser recursed once per key), a sequence nested d deep d² (each node
// kept its whole path).
func TestParseLinear(t *testing.T) {
	shapes := map[string]func(n int) string{
		"block mapping of n keys": func(n int) string {
			var b strings.Builder
			b.WriteString("x:\n")
			for i := range n {
				fmt.Fprintf(&b, "  k%d: [%d]\n", i, i)
			}
			return b.String()
		},
		"flow mapping of n keys": func(n int) string {
			var b strings.Builder
			b.WriteString("x: {")
			for i := range n {
				fmt.Fprintf(&b, "k%d: [%d], ", i, i)
			}
			return b.String() + "}\n"
		},
		"n/250 lists nested 250 deep": func(n int) string {
			return "x: [" + strings.Repeat(strings.Repeat("[", 250)+strings.Repeat("]", 250)+",", n/250) + "]\n"
		},
		"keys nested n/100 deep": func(n int) string {
			var b strings.Builder
			b.WriteString("x:\n")
			for i := range n / 100 {
				fmt.Fprintf(&b, "%s%s:\n", strings.Repeat(" ", i+1), strings.Repeat("k", 200))
			}
			return b.String()
		},
	}
	for name, shape := range shapes {
		var per []float64
		for _, n := range []int{5_000, 10_000, 20_000} {
			data := []byte(shape(n))
			bytes := allocated(func() {
				l := New("f")
				if _, ok := l.Parse(data); !ok {
					t.Fatalf("%s, n=%d: %v", name, n, l.Errs)
				}
			})
			per = append(per, float64(bytes)/float64(len(data)))
		}
		// Bytes allocated per byte of text: constant when linear (a
		// quadratic cost doubles it with each doubling of n).
		if per[2] > 1.3*per[0] {
			t.Errorf("%s: %.0f, %.0f, %.0f bytes allocated per byte of text at n = 5,000, 10,000, 20,000: not linear", name, per[0], per[1], per[2])
		}
	}
}

// TestScanCountsHigh: scan never counts fewer tokens than the library's
// scanner makes, for every YAML file of the repository, the library's
// parser tests, and texts made to have many tokens in few characters.
func TestScanCountsHigh(t *testing.T) {
	srcs := []string{
		`"a""b""c"`, `'a''b'"c"'d'`, `&a *a !t |`, "a: |\n  x\n  y\nb: >-\n  z\n", "- - - [a,{b: c}]", "? a\n: b",
		"a:b:c", "--- a\n...\n--- b", "%YAML 1.2\n---\nx: 1", "a: 'it''s' # c\n#d\n", "{a: [b, c], d: e}", "-\n-\n- x",
	}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			srcs = append(srcs, string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) < 40 {
		t.Fatalf("only %d texts", len(srcs))
	}
	for i, src := range srcs {
		lexed := len(lexer.Tokenize(src))
		if n, _ := countTokens([]byte(src), 1<<30); n < lexed {
			t.Errorf("text %d: scan counts %d tokens, the library's scanner makes %d:\n%s", i, n, lexed, src)
		}
	}
}

// TestDecodeLinear: decoding costs each node a bounded path, not its
// parent's again: a mapping under a key of n/2 bytes with n/10 entries
// took n²/20 bytes of paths.
func TestDecodeLinear(t *testing.T) {
	var per []float64
	for _, n := range []int{20_000, 40_000, 80_000} {
		var b strings.Builder
		fmt.Fprintf(&b, "%s:\n", strings.Repeat("k", n/2))
		for i := range n / 10 {
			fmt.Fprintf(&b, "  e%d: %d\n", i, i)
		}
		data := []byte(b.String())
		var v map[string]map[string]int
		bytes := allocated(func() {
			if err := Decode("f", data, &v); err != nil {
				t.Fatal(err)
			}
		})
		if len(v) != 1 {
			t.Fatalf("decoded %d keys", len(v))
		}
		per = append(per, float64(bytes)/float64(len(data)))
	}
	if per[2] > 1.3*per[0] {
		t.Errorf("%.0f, %.0f, %.0f bytes allocated per byte of text at n = 20,000, 40,000, 80,000: not linear", per[0], per[1], per[2])
	}
}

// TestBoundsDocumented: docs/service.md's row for YAML files states the
// bounds enforced here.
func TestBoundsDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	_, row, ok := strings.Cut(string(page), "\n| a YAML file or text")
	row, _, _ = strings.Cut(row, "\n")
	if !ok {
		t.Fatal("docs/service.md has no row for a YAML file")
	}
	comma := func(n int) string {
		s := fmt.Sprint(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	for _, want := range []string{
		fmt.Sprintf("| %d MiB |", MaxFileBytes>>20),
		fmt.Sprintf("| %d lists, mappings", parser.MaxDepth),
		fmt.Sprintf("%d following aliases", maxDecodeDepth),
		comma(maxTokens) + " tokens",
		comma(maxWork) + " nodes and values",
	} {
		if !strings.Contains(row, want) {
			t.Errorf("docs/service.md's row for a YAML file does not say %q", want)
		}
	}
}
