package policy_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// TestLoadLinear: a policy costs memory in proportion to its text whatever
// the length of its names: a child of a name of n/2 bytes with n/100
// children cost each of them the name again (n²/200 bytes). A child whose
// pattern is longer than any key is refused (no request reaches it), and
// nothing below it is compiled.
func TestLoadLinear(t *testing.T) {
	var per []float64
	for _, n := range []int{20_000, 40_000, 80_000} {
		name := strings.Repeat("n", n/2)
		var b strings.Builder
		fmt.Fprintf(&b, "schema:\n  %s:\n    children:\n", name)
		for i := range n / 100 {
			fmt.Fprintf(&b, "      c%d: {limits: [{algorithm: fixed_window, limit: 10, window: 1m}]}\n", i)
		}
		data := []byte(b.String())
		var err error
		var a, z runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		_, err = policy.Parse("long.yaml", data)
		runtime.ReadMemStats(&z)
		want := `long.yaml:2:3: schema: child "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"... is never matched: its pattern is longer than a key may be (512 bytes`
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "\n") != 0 {
			t.Fatalf("n=%d: %v", n, err)
		}
		per = append(per, float64(z.TotalAlloc-a.TotalAlloc)/float64(len(data)))
	}
	if per[2] > 1.3*per[0] {
		t.Errorf("%.0f, %.0f, %.0f bytes allocated per byte of text at n = 20,000, 40,000, 80,000: not linear", per[0], per[1], per[2])
	}
	// At the bound it loads: 512 bytes, and 1,024 with its "*"s.
	for _, name := range []string{strings.Repeat("n", 512), strings.Repeat("n*", 512)} {
		src := fmt.Sprintf("schema:\n  %q: {limits: [{algorithm: fixed_window, limit: 10, window: 1m}]}\n", name)
		if _, err := policy.Parse("edge.yaml", []byte(src)); err != nil {
			t.Errorf("a name of %d bytes: %v", len(name), err)
		}
		src = fmt.Sprintf("schema:\n  %q: {limits: [{algorithm: fixed_window, limit: 10, window: 1m}]}\n", name+"x")
		if _, err := policy.Parse("edge.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "never matched") {
			t.Errorf("a name of %d bytes: %v", len(name)+1, err)
		}
	}
}

// TestFileMemoryBound: no limits.yaml within yamlfile's bounds (4 MiB,
// 1,000,000 tokens, 256 levels, 400,000 nodes and values counting each use
// of an alias) makes loading it allocate more than 1 GiB in all, garbage
// included (docs/service.md's Bounds): the densest tokens, the longest
// scalar, the deepest nesting, and aliases expanding to the work bound.
func TestFileMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("loads four files at the bounds")
	}
	const bound = 1 << 30
	aliases := func() string {
		var b strings.Builder
		b.WriteString("definitions:\n  a0: &a0 {limits: [1, 2, 3]}\n")
		for i := 1; i < 40; i++ {
			fmt.Fprintf(&b, "  a%d: &a%d {children: {x: *a%d, y: *a%d}}\n", i, i, i-1, i-1)
		}
		return b.String() + "schema:\n  top: *a39\n"
	}
	for _, c := range []struct{ name, src, want string }{
		{"1,000,000 tokens", "schema: [" + strings.Repeat("a,", 499_990) + "a]\n", "want a mapping of child names"},
		{"a 4 MiB scalar", "schema: " + strings.Repeat("a", 4<<20-20) + "\n", "want a mapping of child names"},
		{"nested 255 deep", "schema: [" + strings.Repeat(strings.Repeat("[", 253)+strings.Repeat("]", 253)+",", 1970) + "a]\n", "want a mapping of child names"},
		{"aliases to 400,000 nodes", aliases(), "file too large: more than 400000 nodes and values"},
	} {
		data := []byte(c.src)
		var a, z runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		_, err := policy.Parse("bound.yaml", data)
		runtime.ReadMemStats(&z)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %.200v", c.name, err)
		}
		n := z.TotalAlloc - a.TotalAlloc
		t.Logf("%s (%d bytes): %d MB allocated", c.name, len(data), n>>20)
		if n > bound {
			t.Errorf("%s (%d bytes): %d MB allocated, want at most %d", c.name, len(data), n>>20, bound>>20)
		}
	}
}
