package envoyimport

import (
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
`)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %q: every field of Envoy's format converts", warnings)
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
		{"descriptors: []\n", "x.yaml: config file has no domain"},
		{"domain: d\nfoo: 1\n", "unknown field \"foo\""},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "x.yaml:5:22: descriptors[0].share_threshold: share_threshold is for a value with a wildcard"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "x.yaml:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\""},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", "requests_per_unit is missing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "x.yaml:5:8: descriptors[1]: duplicate descriptor k_v"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k\n    value: '*'\n", "both a key-only form and the wildcard"},
		{"domain: d\ndescriptors:\n  - value: v\n", "descriptors[0]: descriptor has no key"},
	}
	for _, c := range cases {
		_, _, err := Convert([]File{{Name: "x.yaml", Data: []byte(c.yaml)}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	_, _, err := Convert([]File{{Name: "a.yaml", Data: []byte("domain: d\n")}, {Name: "b.yaml", Data: []byte("domain: d\n")}})
	if err == nil || !strings.Contains(err.Error(), "b.yaml:1:9: domain: domain \"d\" is already defined") {
		t.Errorf("duplicate domain: %v", err)
	}
}
