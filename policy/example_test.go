package policy_test

import (
	"fmt"

	"github.com/sluicehq/sluice/policy"
)

func Example() {
	p, err := policy.Parse("limits.yaml", []byte(`
schema:
  user:
    children:
      "*":                     # any user id not matched by name
        limits: [15, 30, 60]   # GCRA: burst 15, 30 per 60 s
        children:
          trade:
            limits: [5, 10, 15]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, path := range [][]string{{"user", "alex", "trade"}, {"user", "alex", "withdrawal"}, {"order", "1"}} {
		m := p.Match(path)
		fmt.Printf("%q unmatched=%v\n", path, m.Unmatched)
		for _, lv := range m.Hits {
			fmt.Printf("  %-13s key %-16s tag %s\n", lv.Pattern, lv.Key, lv.Tag)
		}
	}
	// Output:
	// ["user" "alex" "trade"] unmatched=false
	//   user/*        key user:alex        tag user:alex
	//   user/*/trade  key user:alex:trade  tag user:alex
	// ["user" "alex" "withdrawal"] unmatched=false
	//   user/*        key user:alex        tag user:alex
	// ["order" "1"] unmatched=true
}

func ExampleHit_LimitKey() {
	p, err := policy.Parse("limits.yaml", []byte(`
schema:
  tigerfeeding:                # 100 per 10 s for everyone together
    limits: {algorithm: fixed_window, limit: 100, window: 10s}
    children:
      "*":                     # each caller once per 10 s, two ways
        limits:
          - {algorithm: gate, interval: 10s}
          - {algorithm: gcra, burst: 0, count: 1, period: 10s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m := p.Match([]string{"tigerfeeding", "alex"})
	for _, h := range m.Hits {
		for j, l := range h.Limits {
			spec := l.Spec()
			fmt.Printf("key %-19s tag %-17s %s\n", h.LimitKey(j), h.Tag, spec.AppendJSON(nil))
		}
	}
	// Output:
	// key tigerfeeding        tag tigerfeeding      {"algorithm":"fixed_window","limit":100,"window":"10s"}
	// key tigerfeeding:alex#0 tag tigerfeeding:alex {"algorithm":"gate","interval":"10s"}
	// key tigerfeeding:alex#1 tag tigerfeeding:alex {"algorithm":"gcra","count":1,"period":"10s"}
}

func ExampleParse_errors() {
	_, err := policy.Parse("limits.yaml", []byte(`
schema:
  user:
    children:
      "*":
        limits: [15, 30]
        children:
          trade:
            limits: [{algorithm: gcra, burst: 5, count: -10, period: 1s}]
            unlimited: true
`))
	fmt.Println(err)
	// Output:
	// limits.yaml:6:17: schema.user.children.*.limits: a [burst, count, period] shorthand has 3 values, got 2
	// limits.yaml:9:57: schema.user.children.*.children.trade.limits[0].count: gcra count must be positive, got -10
	// limits.yaml:10:13: schema.user.children.*.children.trade.unlimited: an unlimited node cannot have limits
}
