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
