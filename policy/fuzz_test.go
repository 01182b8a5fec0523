package policy_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
)

// FuzzParse checks that no input makes the loader panic, that every error
// carries a position, and that what loads can be matched.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		seed, full, "", "schema:", "schema: {}", "schema:\n  a: {limits: [1, 2, 3]}\n",
		"schema:\n  a: {limits: [1, 2, 3]}\n---\nb: 1\n",
		"schema:\n  a: &a {limits: [[1, 2, 3], {algorithm: gate, interval: 1s}]}\n  b: *a\n  c: {<<: *a}\n",
		"unmatched: deny\nschema:\n  \"*\": {shadow: true, limits: {algorithm: token_bucket, burst: 1, rate: 1, per: 1s}}\n",
		"schema:\n  a: !!map {x: *y}\n  ~: [\n",
		"schema:\n  a: {limits: {algorithm: sliding_log, limits: {h: {limit: 1, window: 1h}}, buckets: 6}}\n",
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/limits.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse("fuzz.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatal("both a policy and an error")
			}
			var list yamlfile.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %#v", err)
			}
			for _, e := range list {
				if e.Pos.Filename != "fuzz.yaml" || e.Pos.Line < 1 || e.Pos.Column < 1 || e.Msg == "" {
					t.Fatalf("error without a position or message: %#v", e)
				}
			}
			return
		}
		if p == nil {
			t.Fatal("no policy and no error")
		}
		for _, n := range p.Nodes() {
			if n.Pattern == "" {
				t.Fatalf("node without a pattern: %+v", n)
			}
		}
		for _, path := range [][]string{{"user", "alex", "trade"}, {"a", "b", "c", "d"}, {"*", "*"}, {""}} {
			m := p.Match(path)
			for _, r := range requests(m, 1, time.Unix(1, 0)) {
				if r.Plan == nil || r.Plan.MaxCost() == 0 {
					t.Fatalf("request with an invalid limit: %+v", r)
				}
			}
		}
	})
}
