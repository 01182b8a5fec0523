package policy_test

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
)

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // file:line:col: field: message
	}{
		{"empty file", "", []string{
			"f.yaml:1:1: schema: empty tree: the file has no schema",
		}},
		{"comment only", "# nothing\n", []string{
			"f.yaml:1:1: schema: empty tree: the file has no schema",
		}},
		{"no schema", "unmatched: deny\n", []string{
			"f.yaml:1:1: schema: empty tree: the file has no schema",
		}},
		{"null schema", "unmatched: deny\nschema:\n", []string{
			"f.yaml:2:1: schema: empty tree: schema has no nodes",
		}},
		{"empty schema", "schema: {}\n", []string{
			"f.yaml:1:9: schema: empty tree: schema has no nodes",
		}},
		{"top level not a mapping", "- schema\n", []string{
			"f.yaml:1:1: want a mapping with schema (and unmatched), got a list",
		}},
		{"syntax", "schema:\n  a: [1, 2\n", []string{
			"f.yaml:2:6: YAML syntax: sequence end token ']' not found",
		}},
		{"tab", "schema:\n\ta: {}\n", []string{
			"f.yaml:2:1: YAML syntax: found character '\t' that cannot start any token",
		}},
		{"two documents", "schema:\n  a: {unlimited: true}\n---\nschema: {}\n", []string{
			"f.yaml:4:1: more than one YAML document (only one is allowed)",
		}},
		{"calendar windows", `
schema:
  bad:
    limits: {algorithm: fixed_window, limit: 10, window: week, time_zone: Mars/Base}
  bad2:
    limits: {algorithm: gcra, burst: 1, count: 1, period: 1s, time_zone: UTC}
  bad3:
    lease: true
    limits: {algorithm: fixed_window, limit: 10, window: day}
  bad4:
    limits: {algorithm: fixed_window, limit: 10, window: day, anchor_day: 3}
  bad5:
    limits: {algorithm: fixed_window, limit: 10, window: 1h, time_zone: UTC}
  bad6:
    global: true
    limits: {algorithm: fixed_window, limit: 10, window: day}
`, []string{
			`f.yaml:4:75: schema.bad.limits.time_zone: time_zone "Mars/Base" is not an IANA time zone, such as Europe/Berlin`,
			`f.yaml:6:74: schema.bad2.limits.time_zone: gcra does not take "time_zone"`,
			`f.yaml:8:5: schema.bad3.lease: limit 0 is a calendar window: leases are for windows of a duration`,
			`f.yaml:11:75: schema.bad4.limits.anchor_day: anchor_day is for a month's window, not a day's`,
			`f.yaml:13:73: schema.bad5.limits.time_zone: time_zone, anchor_day and week_start are for a calendar window (window: day, week, month or year)`,
			`f.yaml:15:5: schema.bad6.global: limit 0 is a calendar window: global limits are for windows of a duration`,
		}},
		{"debt", `
schema:
  tokens:
    debt: true
    limits:
      - {algorithm: fixed_window, limit: 1000, window: 1h}
      - {algorithm: sliding_log, limits: [{limit: 5, window: 1s}], mode: uniform}
    children:
      "*":
        limits: {algorithm: gate, interval: 1s, debt: true}
  leased:
    lease: true
    limits: {algorithm: fixed_window, limit: 10, window: 1s, debt: true}
  bare:
    debt: true
    children: {x: {unlimited: true}}
`, []string{
			`f.yaml:4:5: schema.tokens.debt: limit 1: debt is for gcra, token_bucket, fixed_window, window_counter and a binary sliding_log, not a uniform one`,
			`f.yaml:10:55: schema.tokens.children.*.limits.debt: debt is for gcra, token_bucket, fixed_window, window_counter and a binary sliding_log, not gate`,
			`f.yaml:12:5: schema.leased.lease: limit 0 has a debt: a lease admits from units taken ahead, and a charge it denied would never reach the store`,
			`f.yaml:15:5: schema.bare.debt: debt needs the node's own limits`,
		}},
		{"block growth", `
schema:
  a: {limits: {algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, growth: 0}}}
  b: {limits: {algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, growth: 0.5}}}
  c: {limits: {algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s, growth: 0.0}}}
  d: {limits: {algorithm: gcra, burst: 1, count: 1, period: 1s, block: {for: 1s}}}
`, []string{
			// 0 is refused as 0.5 is (it read as 1, unset).
			`f.yaml:3:90: schema.a.limits.block.growth: block growth must be 1 to 1000, got 0 (leave it out for 1)`,
			`f.yaml:4:72: schema.b.limits.block.growth: block growth must be 1 to 1000, got 0.5`,
			`f.yaml:5:90: schema.c.limits.block.growth: block growth must be 1 to 1000, got 0 (leave it out for 1)`,
		}},
		{"unknown fields", `
unmatched: maybe
extra: 1
schema:
  user:
    limit: [1, 2, 3]
    children:
      "*":
        limits: {algorithm: gcra, brust: 5, count: 10, period: 1s}
`, []string{
			`f.yaml:2:12: unmatched: want allow or deny, got "maybe"`,
			`f.yaml:3:1: extra: unknown field "extra" (want schema, unmatched, counts or definitions)`,
			`f.yaml:6:5: schema.user.limit: unknown field "limit" (want limits, children, unlimited, shadow, quota_mode, name, replaces, shared_counter, lease, global, delay, request_limit, debt, escalate, allow or deny)`,
			`f.yaml:9:35: schema.user.children.*.limits.brust: unknown field "brust" (want algorithm, burst, count, period, ...`,
		}},
		{"wrong types", `
schema:
  a: 5
  b:
    limits: {algorithm: fixed_window, limit: "10", window: 10}
    shadow: yes
  c:
    limits: [1, 2, 3]
    children: [x]
  d:
    limits: [[1, 2, 3], 7]
  e:
    limits: "15 30 60"
  f:
    limits: [1, x, 3]
  g:
    limits: [1, 2, {}]
`, []string{
			`f.yaml:3:6: schema.a: want a mapping of limits, children, unlimited and shadow, got integer 5`,
			`f.yaml:5:46: schema.b.limits.limit: want an integer, got "10"`,
			`f.yaml:5:60: schema.b.limits.window: want a duration such as "60s", got integer 10`,
			`f.yaml:6:13: schema.b.shadow: want true or false, got "yes"`,
			`f.yaml:9:15: schema.c.children: want a mapping of child names to nodes, got a list`,
			`f.yaml:11:25: schema.d.limits[1]: want a limit mapping or a [burst, count, period] list, got integer 7`,
			`f.yaml:13:13: schema.e.limits: want a list of limits, a limit mapping or [burst, count, period], got "15 30 60"`,
			`f.yaml:15:17: schema.f.limits.count: want an integer, got "x"`,
			`f.yaml:17:14: schema.g.limits[0]: want a limit mapping or a [burst, count, period] list, got integer 1`,
			`f.yaml:17:17: schema.g.limits[1]: want a limit mapping or a [burst, count, period] list, got integer 2`,
			`f.yaml:17:20: schema.g.limits[2]: no algorithm (want gcra, ...`,
		}},
		{"negative and zero rates", `
schema:
  user:
    children:
      "*":
        limits: [-1, 30, 60]
        children:
          trade:
            limits:
              - {algorithm: gcra, burst: 5, count: 10, period: 1s}
              - {algorithm: gcra, burst: -5, count: 10, period: 1s}
              - {algorithm: token_bucket, burst: 5, rate: 0, per: 1s}
              - {algorithm: fixed_window, limit: 10, window: -1s}
              - {algorithm: gate}
              - [1, 0, 1]
              - [1, 1, 0]
              - [1, 1, 99999999999]
              - {algorithm: fixed_window, limit: 9223372036854775807, window: 10s}
`, []string{
			`f.yaml:6:18: schema.user.children.*.limits.burst: gcra burst must be zero or more, got -1`,
			`f.yaml:11:42: schema.user.children.*.children.trade.limits[1].burst: gcra burst must be zero or more, got -5`,
			`f.yaml:12:59: schema.user.children.*.children.trade.limits[2].rate: token_bucket rate must be positive, got 0`,
			`f.yaml:13:62: schema.user.children.*.children.trade.limits[3].window: fixed_window window must be positive, got -1s`,
			`f.yaml:14:17: schema.user.children.*.children.trade.limits[4]: gate interval must be positive, got 0s`,
			`f.yaml:15:21: schema.user.children.*.children.trade.limits[5].count: gcra count must be positive, got 0`,
			`f.yaml:16:24: schema.user.children.*.children.trade.limits[6].period: gcra period must be positive, got 0s`,
			`f.yaml:17:24: schema.user.children.*.children.trade.limits[7].period: 99999999999 seconds is out of range`,
			`f.yaml:18:50: schema.user.children.*.children.trade.limits[8].limit: fixed_window limit 9223372036854775807 exceeds 9007199254740991 (2^53-1, the largest count both stores hold exactly)`,
		}},
		{"algorithm", `
schema:
  a: {limits: {algorithm: sliding, limit: 5}}
  b: {limits: {algorithm: gate, interval: 1s, limit: 4}}
  c: {limits: {algorithm: gcra, burst: 1, count: 1, period: 1 hour}}
  d: {limits: {algorithm: gcra, burst: 99999999999999999999, count: 1, period: 1s}}
`, []string{
			`f.yaml:3:27: schema.a.limits.algorithm: unknown algorithm "sliding" (want gcra, ...`,
			`f.yaml:4:54: schema.b.limits.limit: gate does not take "limit"`,
			`f.yaml:5:61: schema.c.limits.period: time: unknown unit " hour" in duration "1 hour" (write 1h)`,
			`f.yaml:6:40: schema.d.limits.burst: integer 99999999999999999999 is out of range`,
		}},
		{"shorthand length", `
schema:
  a: {limits: [15, 30]}
  b: {limits: [[1, 2, 3, 4]]}
  c: {limits: []}
  d: {limits: }
`, []string{
			`f.yaml:3:15: schema.a.limits: a [burst, count, period] shorthand has 3 values, got 2`,
			`f.yaml:4:16: schema.b.limits[0]: a [burst, count, period] shorthand has 3 values, got 4`,
			`f.yaml:5:15: schema.c.limits: limits is empty`,
			`f.yaml:6:7: schema.d.limits: limits is empty`,
		}},
		{"duplicates", `
schema:
  user:
    children:
      "*":
        limits: [1, 2, 3]
        limits: [4, 5, 6]
      "*": {unlimited: true}
      bob: {limits: {algorithm: gate, interval: 1s, interval: 2s}}
  user: {unlimited: true}
  user: {limits: [1, 2]}
`, []string{
			`f.yaml:7:9: schema.user.children.*.limits: duplicate field "limits" (first at line 6)`,
			`f.yaml:8:7: schema.user.children.*: duplicate child "*" (first at line 5)`,
			`f.yaml:9:53: schema.user.children.bob.limits.interval: duplicate field "interval" (first at line 9)`,
			`f.yaml:10:3: schema.user: duplicate child "user" (first at line 3)`,
			// A duplicate's own errors are reported too.
			`f.yaml:11:3: schema.user: duplicate child "user" (first at line 3)`,
			`f.yaml:11:18: schema.user.limits: a [burst, count, period] shorthand has 3 values, got 2`,
		}},
		{"node shapes", `
schema:
  a:
  b: {}
  c: {unlimited: true, limits: [1, 2, 3]}
  d: {unlimited: true, children: {x: {unlimited: true}}}
  e: {unlimited: true, shadow: true}
  f: {limits: [1, 2, 3], children: {}}
  g: {unlimited: false}
  h: {unlimited: 1}
`, []string{
			`f.yaml:3:3: schema.a: empty node: give it limits, children or unlimited: true`,
			`f.yaml:4:3: schema.b: empty node: give it limits, children or unlimited: true`,
			`f.yaml:5:7: schema.c.unlimited: an unlimited node cannot have limits`,
			`f.yaml:6:7: schema.d.unlimited: an unlimited node cannot have children (nothing below it is limited)`,
			`f.yaml:7:24: schema.e.shadow: an unlimited node cannot be shadow`,
			`f.yaml:8:36: schema.f.children: children is empty`,
			`f.yaml:9:3: schema.g: empty node: give it limits, children or unlimited: true`,
			`f.yaml:10:18: schema.h.unlimited: want true or false, got integer 1`,
		}},
		{"empty name", `
schema:
  '':
    limits: [0, 1, 1]
  a:
    children: {"": {limits: [0, 1, 1]}}
`, []string{
			`f.yaml:3:3: schema: a child's name may not be empty`,
			`f.yaml:6:16: schema.a.children: a child's name may not be empty`,
		}},
		{"leases", `
schema:
  a: {lease: true, children: {x: {limits: [1, 2, 3]}}}
  b: {lease: true, limits: [{algorithm: fixed_window, limit: 5, window: 1s}, {algorithm: gcra, burst: 1, count: 1, period: 1s}]}
  c: {lease: yes, limits: {algorithm: fixed_window, limit: 5, window: 1s}}
`, []string{
			`f.yaml:3:7: schema.a.lease: lease needs the node's own limits`,
			`f.yaml:4:7: schema.b.lease: limit 1 is gcra: only a fixed_window limit can be leased: a lease's units count in the window when taken and are used until it ends, which only a window that ends with the lease keeps exact`,
			`f.yaml:5:14: schema.c.lease: want true or false, got "yes"`,
		}},
		{"yaml features", `
schema:
  a: {limits: *nope}
  b: !!map {unlimited: true}
  ~: {unlimited: true}
  c: {<<: 5, unlimited: true}
  "a.b": {limit: 1}
`, []string{
			`f.yaml:3:15: schema.a.limits: unknown alias *nope`,
			`f.yaml:4:6: schema.b: YAML tags (!!map) are not supported`,
			`f.yaml:5:3: schema: want a name as key, got null`,
			`f.yaml:6:11: schema.c: a merge key (<<) takes a mapping or a list of mappings, got integer 5`,
			`f.yaml:7:11: schema."a.b".limit: unknown field "limit" (want limits, children, unlimited, shadow, quota_mode, name, replaces, shared_counter, lease, global, delay, request_limit, debt, escalate, allow or deny)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse("f.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse = %v, nil", p)
			}
			var list yamlfile.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %T is not an ErrorList: %v", err, err)
			}
			var got []string
			for i, e := range list {
				s := e.Error()
				// A want that ends in "..." matches by prefix, for lists
				// that grow as algorithms are added.
				if i < len(tc.want) && strings.HasSuffix(tc.want[i], "...") && strings.HasPrefix(s, strings.TrimSuffix(tc.want[i], "...")) {
					s = tc.want[i]
				}
				got = append(got, s)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
			var lines []string
			for _, e := range list {
				lines = append(lines, e.Error())
			}
			if err.Error() != strings.Join(lines, "\n") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestErrorDetails(t *testing.T) {
	_, err := policy.Parse("f.yaml", []byte("schema:\n  a: {limits: [1, 0, 1]}\n  b: {limit: 1}\n"))
	if !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("errors.Is(%v, algo.ErrInvalid) = false", err)
	}
	var e *yamlfile.Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(*Error) failed: %v", err)
	}
	want := yamlfile.Error{
		Pos:   yamlfile.Position{Filename: "f.yaml", Line: 2, Column: 19},
		Field: "schema.a.limits.count",
		Msg:   "gcra count must be positive, got 0",
	}
	if e.Pos != want.Pos || e.Field != want.Field || e.Msg != want.Msg || e.Err == nil {
		t.Errorf("first error = %+v, want %+v", *e, want)
	}
}

// TestAliasBombs checks that a small file whose aliases or merge keys
// expand without end is refused quickly, not compiled.
func TestAliasBombs(t *testing.T) {
	for _, form := range []string{"{children: {x: *a%d, y: *a%d}}", "{<<: [*a%d, *a%d]}"} {
		var b strings.Builder
		b.WriteString("definitions:\n  a0: &a0 {limits: [1, 2, 3]}\n")
		for i := 1; i < 40; i++ {
			fmt.Fprintf(&b, "  a%d: &a%d "+form+"\n", i, i, i-1, i-1)
		}
		b.WriteString("schema:\n  top: *a39\n")
		_, err := policy.Parse("bomb.yaml", []byte(b.String()))
		if err == nil || !strings.Contains(err.Error(), "file too large") {
			t.Errorf("%s: err = %v", form, err)
		}
	}
}

// TestPackageDocNamesEveryField: the package documentation, which
// docs/policy.md calls the whole format, names every field a node and the
// file's top level take, as the loader lists them when it refuses an
// unknown one.
func TestPackageDocNamesEveryField(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "policy.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil || f.Doc == nil {
		t.Fatalf("no package documentation in policy.go: %v", err)
	}
	doc := f.Doc.Text()
	want := regexp.MustCompile(`\(want ([a-z_, ]+)\)`)
	for _, src := range []string{"bogus: 1\n", "schema:\n  a:\n    limits: [1, 1, 1]\n    bogus: 1\n"} {
		_, err := policy.Parse("f.yaml", []byte(src))
		m := want.FindStringSubmatch(fmt.Sprint(err))
		if m == nil {
			t.Fatalf("%q: no list of fields in %v", src, err)
		}
		for _, field := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if field != "or" && !regexp.MustCompile(`(^|\s)`+field+`(:|,| and )`).MatchString(doc) {
				t.Errorf("the package documentation does not name the field %s", field)
			}
		}
	}
}
