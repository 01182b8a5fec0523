package envoyimport

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

func TestConvertExample(t *testing.T) {
	out, warnings, err := Convert([]File{{Name: "a.yaml", Data: []byte(`
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: "*"
    rate_limit: {unit: MINUTE, requests_per_unit: 50, name: dbs, replaces: [{name: other}]}
`)}, {Name: "b.yaml", Data: []byte(`
domain: other
descriptors:
  - key: k
    value: 10
    detailed_metric: true
    rate_limit: {unit: year, requests_per_unit: 1}
`)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "descriptors[0].detailed_metric: detailed_metric is dropped") {
		t.Errorf("warnings %q: every field of Envoy's format converts, and detailed_metric is dropped with a word", warnings)
	}
	p, err := policy.Parse("out", out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"mongo_cps/database/users": "fixed_window 500 1s",
		"mongo_cps/database/*":     "fixed_window 50 1m0s",
		"other/k/10":               "fixed_window 1 8760h0m0s",
	}
	got := map[string]string{}
	for _, n := range p.Nodes() {
		for _, s := range n.Specs {
			got[n.Pattern] = s.Algorithm + " " + strconv.FormatInt(s.Limit, 10) + " " + time.Duration(s.Window).String()
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q\n%s", k, got[k], v, out)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"descriptors: []\n", "x.yaml: config file cannot have an empty domain"},
		{"domain: d\nfoo: 1\n", "x.yaml:2:1: foo: unknown field \"foo\""},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "x.yaml:5:22: descriptors[0].share_threshold: share_threshold is for a value with a wildcard"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "x.yaml:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\""},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", "requests_per_unit is missing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "x.yaml:5:8: descriptors[1]: duplicate descriptor k_v"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k\n    value: '*'\n", "both a key-only form and the wildcard"},
		{"domain: d\ndescriptors:\n  - value: v\n", "descriptors[0]: descriptor has no key"},
	}
	for _, c := range cases {
		_, _, err := Convert([]File{{Name: "x.yaml", Data: []byte(c.yaml)}}, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	_, _, err := Convert([]File{{Name: "a.yaml", Data: []byte("domain: d\n")}, {Name: "b.yaml", Data: []byte("domain: d\n")}}, "")
	if err == nil || !strings.Contains(err.Error(), "b.yaml:1:9: domain: domain \"d\" is already defined") {
		t.Errorf("duplicate domain: %v", err)
	}
}

// TestConvertAsEnvoyDoes goes over every configuration in
// envoyproxy/ratelimit's examples/ and test/config/ (as of 2026-11), each
// written here anew to show what it tests, and converts it the way Envoy's
// service treats it: what Envoy loads converts (with a warning for what
// Sluice drops or enforces differently), what it refuses is an error
// naming the file, line and field.
func TestConvertAsEnvoyDoes(t *testing.T) {
	limited := "  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	for _, c := range []struct {
		envoy   string // the file of envoyproxy/ratelimit it stands for
		files   []string
		err     string // what the error holds; "" converts
		warning string // what a warning holds
	}{
		// examples/ratelimit/config: replaces, names, unlimited, quota_mode
		// and metadata (the flagship example once failed on both).
		{"examples/ratelimit/config/example.yaml", []string{"domain: rl\ndescriptors:\n" +
			"  - key: category\n    value: account\n    rate_limit:\n      replaces: [{name: a}, {name: b}]\n      unit: minute\n      requests_per_unit: 4\n" +
			"  - key: bar\n    value: a\n    rate_limit: {name: a, unit: minute, requests_per_unit: 1}\n" +
			"  - key: qux\n    rate_limit: {unlimited: true}\n" +
			"  - key: service\n    value: s1\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:\n      service_with_quota: {name: \"s1\"}\n"},
			"", "metadata is dropped"},
		{"examples/ratelimit/config/config.yaml", []string{"domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 500}\n"}, "", ""},
		{"test/config/basic_config.yaml", []string{"domain: test-domain\ndescriptors:\n" + limited + "  - key: k2\n    descriptors:\n      - key: sub\n        rate_limit: {unit: second, requests_per_unit: 5}\n"}, "", ""},
		{"test/config/metadata.yaml", []string{"domain: d\ndescriptors:\n" + limited + "    metadata: {name: service_1, nested: [1, {a: b}]}\n"}, "", "metadata is dropped"},
		{"test/config/shadowmode_config.yaml", []string{"domain: d\ndescriptors:\n" + limited + "    shadow_mode: true\n"}, "", ""},
		{"test/config/wildcard.yaml", []string{"domain: d\ndescriptors:\n  - key: path\n    value: /foo/*\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"}, "", ""},
		{"test/config/share_threshold.yaml", []string{"domain: d\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"}, "", ""},
		// A domain with no descriptors loads: Envoy limits nothing in it
		// (this once failed with "an invalid policy (a bug)").
		{"test/config/duplicate_domain.yaml, alone", []string{"domain: test-domain\ndescriptors:\n"}, "", ""},
		{"test/config/duplicate_domain.yaml, with basic_config.yaml", []string{"domain: test-domain\ndescriptors:\n" + limited, "domain: test-domain\ndescriptors:\n"}, `domain "test-domain" is already defined by another file`, ""},
		// Envoy's MERGE_DOMAIN_CONFIG mode merges these; by default it
		// refuses them, as import-envoy does.
		{"test/config/merge_domain_key1.yaml with merge_domain_key2.yaml", []string{"domain: m\ndescriptors:\n" + limited, "domain: m\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"}, `domain "m" is already defined by another file`, ""},
		{"test/config/empty_domain.yaml", []string{"descriptors:\n"}, "f0.yaml: config file cannot have an empty domain", ""},
		{"test/config/empty_key.yaml", []string{"domain: d\ndescriptors:\n  - value: v\n"}, "descriptors[0]: descriptor has no key", ""},
		{"test/config/duplicate_key.yaml", []string{"domain: d\ndescriptors:\n" + limited + limited}, "duplicate descriptor k_v", ""},
		{"test/config/bad_limit_unit.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 5}\n"}, `invalid rate limit unit "foo"`, ""},
		{"test/config/unlimited_with_unit.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n"}, "should not specify rate limit unit when unlimited", ""},
		{"test/config/replaces_self.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces: [{name: self}]\n      unit: second\n      requests_per_unit: 5\n"}, `descriptors[0].rate_limit.replaces[0]: replaces should not contain the name of the same descriptor ("self")`, ""},
		{"test/config/replaces_empty.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n"}, "descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry", ""},
		{"test/config/bad_yaml.yaml", []string{"'''\n"}, "f0.yaml:1:1: YAML syntax", ""},
		{"test/config/misspelled_key.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day, requests_per_unit: 5}\n"}, `f0.yaml:4:5: descriptors[0].ratelimit: unknown field "ratelimit"`, ""},
		{"test/config/misspelled_key2.yaml", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n"}, `descriptors[0].rate_limit.requestsperunit: unknown field "requestsperunit"`, ""},
		// A key that is not a string (it once read "config file has no
		// domain").
		{"test/config/non_string_key.yaml", []string{"0.25: test-domain\ndescriptors:\n" + limited}, `f0.yaml:1:1: "0.25": unknown field "0.25" (want domain or descriptors)`, ""},
		{"test/config/non_map_list.yaml", []string{"domain: d\ndescriptors:\n  - a\n  - b\n"}, "descriptors[0]: want a mapping", ""},
	} {
		var files []File
		for i, f := range c.files {
			files = append(files, File{Name: "f" + strconv.Itoa(i) + ".yaml", Data: []byte(f)})
		}
		out, warnings, err := Convert(files, "")
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: Envoy loads it; import-envoy: %v", c.envoy, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: Envoy refuses it; import-envoy: %v, want an error holding %q", c.envoy, err, c.err)
		case c.err == "":
			if _, err := policy.Parse("out", out); err != nil {
				t.Errorf("%s: the output does not load: %v\n%s", c.envoy, err, out)
			}
		}
		if got := strings.Join(warnings, "\n"); c.warning != "" && !strings.Contains(got, c.warning) || c.warning == "" && got != "" {
			t.Errorf("%s: warnings %q, want %q", c.envoy, got, c.warning)
		}
	}
}

// TestManyDescriptors (issue 54, item 7): a domain of 10,000 descriptors,
// and of 30,000, which envoyproxy/ratelimit takes, converts, and its output
// loads (10,000 was refused: "more than 100000 nodes"); past the bound
// (about 40,000 in this form) the error says so.
func TestManyDescriptors(t *testing.T) {
	file := func(n int) []byte {
		var b strings.Builder
		b.WriteString("domain: gw\ndescriptors:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - key: user\n    value: u%d\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n", i)
		}
		return []byte(b.String())
	}
	for _, n := range []int{10_000, 30_000} {
		out, _, err := Convert([]File{{"many.yaml", file(n)}}, "")
		if err != nil {
			t.Fatalf("%d descriptors: %.300v", n, err)
		}
		p, err := policy.Parse("out.yaml", out)
		if err != nil {
			t.Fatalf("%d descriptors, the output: %.300v", n, err)
		}
		if m := p.Match([]string{"gw", "user", fmt.Sprintf("u%d", n-1)}); m.Unmatched {
			t.Errorf("%d descriptors: the last is not matched", n)
		}
	}
	if _, _, err := Convert([]File{{"many.yaml", file(41_000)}}, ""); err == nil || !strings.Contains(err.Error(), "file too large: more than 400000 nodes and values") {
		t.Errorf("41,000 descriptors: %.300v", err)
	}
}
