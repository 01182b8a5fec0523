package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

const listsPolicy = `
schema:
  login:
    limits: {algorithm: fixed_window, limit: 3, window: 1h}   # every caller together
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 1, window: 1h}
        allow: [10.0.0.0/8, "2001:db8::/32", health-checker]
        deny: [203.0.113.0/24, 10.9.9.9, scraper, 198.51.100.0/24]
        children:
          "*":                # login/<ip>/<user>
            allow: [admin]
`

// TestLists decides through allow and deny lists: an allowed caller is
// never limited and counts nowhere, a denied one is refused without a
// decision, allow wins over deny on one node and across two, and an
// IPv4-mapped address is its IPv4 address.
func TestLists(t *testing.T) {
	p, err := Parse("lists.yaml", []byte(listsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	defer st.Close()
	c := &Checker{Policy: NewCurrent(p), Store: st}
	at := time.Unix(1_800_000_000, 0)
	check := func(segs ...string) Decision {
		t.Helper()
		var d Decision
		if err := c.Decide(context.Background(), &Query{Time: at, Paths: []PathQuery{{Path: append([]string{"login"}, segs...), Cost: 1}}}, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		segs   []string
		listed string
	}{
		{[]string{"10.1.2.3"}, "allow 10.0.0.0/8 at login/*"},
		{[]string{"::ffff:10.1.2.3"}, "allow 10.0.0.0/8 at login/*"},
		{[]string{"2001:db8::1"}, "allow 2001:db8::/32 at login/*"},
		{[]string{"health-checker"}, "allow health-checker at login/*"},
		{[]string{"10.9.9.9"}, "allow 10.0.0.0/8 at login/*"},           // on both lists: allow wins
		{[]string{"198.51.100.7", "admin"}, "allow admin at login/*/*"}, // a deny above, an allow below
	} {
		for i := range 5 { // over both limits, were they counted
			if d := check(tc.segs...); !d.Allowed || d.Listed != tc.listed || len(d.Levels) != 0 {
				t.Fatalf("%v, request %d: allowed %v, listed %q, %d levels; want allowed by %q, no level", tc.segs, i+1, d.Allowed, d.Listed, len(d.Levels), tc.listed)
			}
		}
	}
	for _, tc := range []struct{ seg, listed string }{
		{"203.0.113.9", "deny 203.0.113.0/24 at login/*"},
		{"scraper", "deny scraper at login/*"},
		{"198.51.100.8", "deny 198.51.100.0/24 at login/*"},
	} {
		d := check(tc.seg)
		if d.Allowed || d.Listed != tc.listed || len(d.Levels) != 0 || d.Summary.RetryAfter != algo.Never {
			t.Errorf("%s: allowed %v, listed %q, %d levels, retry %v; want denied by %q, for good", tc.seg, d.Allowed, d.Listed, len(d.Levels), d.Summary.RetryAfter, tc.listed)
		}
	}
	// Nothing above was counted: the shared limit of 3 still admits 3
	// unlisted callers, and refuses the 4th.
	for i := range 4 {
		d := check(fmt.Sprintf("192.0.2.%d", i))
		if d.Allowed != (i < 3) || d.Listed != "" {
			t.Errorf("unlisted caller %d: allowed %v, listed %q", i+1, d.Allowed, d.Listed)
		}
	}
	// explain's view: Match names the entry, and hits nothing.
	if m := p.Match([]string{"login", "scraper"}); m.Listed != (Listed{List: "deny", Entry: "scraper", Pattern: "login/*"}) || len(m.Hits) != 0 || m.Unmatched {
		t.Errorf("Match: %+v", m)
	}
}

// TestListsAddressSpellings: at a node whose lists hold addresses, a
// segment that reads as an address is one address in its one spelling,
// or refused; any other segment is a key. Every spelling
// netip reads of a denied address is denied; every other spelling (leading
// zeros, a port, brackets, a zone on IPv4, the integer form, spaces) is a
// bad request that counts nothing; and the keys are the canonical
// spelling, so two spellings of one address share one limit.
func TestListsAddressSpellings(t *testing.T) {
	c := memoryChecker(t, `
schema:
  ip:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 1, window: 1h}
        deny: [203.0.113.0/24, "2001:db8::/32"]
        allow: [health-checker]
`)
	decide := func(seg string) (Decision, error) {
		var d Decision
		err := c.Decide(context.Background(), &Query{Time: time.Unix(1_800_000_000, 0), Paths: []PathQuery{{Path: []string{"ip", seg}, Cost: 1}}}, &d)
		return d, err
	}
	for _, seg := range []string{"203.0.113.5", "::ffff:203.0.113.5", "::FFFF:cb00:7105", "2001:db8::1%eth0", "2001:DB8::1", "2001:0db8:0000::1"} {
		if d, err := decide(seg); err != nil || d.Allowed || d.Listed == "" {
			t.Errorf("%q: allowed %v, listed %q, err %v; want denied", seg, d.Allowed, d.Listed, err)
		}
	}
	for _, seg := range []string{"203.0.113.005", "0203.0.113.5", "203.0.113.5:80", "[2001:db8::1]", "203.0.113.5%eth0", "3405803781",
		" 203.0.113.5", "203.0.113.5 ", "0xcb.0.113.5", "203.0.113", "203.0.113.5.", "[::ffff:203.0.113.5]:80", "203.0.113.09", "2001:0db8:00000::1"} {
		if _, err := decide(seg); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("%q: err %v, want a bad request", seg, err)
		}
	}
	if d, err := decide("health-checker"); err != nil || !d.Allowed || d.Listed != "allow health-checker at ip/*" {
		t.Errorf("a listed key: %+v %v", d, err)
	}
	if d, err := decide("scraper"); err != nil || !d.Allowed || d.Listed != "" {
		t.Errorf("a key that is no address: %+v %v, want it limited as a key", d, err)
	}
	// One limit per address, whatever its spelling.
	for i, seg := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db9::1", "2001:DB9:0::1"} {
		d, err := decide(seg)
		if err != nil || d.Allowed != (i%2 == 0) {
			t.Errorf("%q: allowed %v, err %v; want allowed %v", seg, d.Allowed, err, i%2 == 0)
		}
		if err == nil && len(d.Levels) == 1 && strings.Contains(d.Levels[0].Key, "::ffff") {
			t.Errorf("%q: key %q", seg, d.Levels[0].Key)
		}
	}
}

// TestListErrors: bad entries and oversized lists are reported where they
// are, with the bound.
func TestListErrors(t *testing.T) {
	long := "[" + strings.Repeat("a, ", maxListEntries) + "a]"
	for _, tc := range []struct{ yaml, want string }{
		{"schema:\n  \"*\":\n    limits: [1, 1, 1]\n    deny: [10.0.0.0/33]\n", `l.yaml:4:11: schema.*.deny[0]: "10.0.0.0/33" is not a CIDR range`},
		{"schema:\n  \"*\":\n    limits: [1, 1, 1]\n    allow: [\"\"]\n", `schema.*.allow[0]: an entry is never empty`},
		{"schema:\n  \"*\":\n    limits: [1, 1, 1]\n    allow: " + long + "\n", fmt.Sprintf("schema.*.allow: at most %d entries, got %d", maxListEntries, maxListEntries+1)},
		{"schema:\n  a:\n    children:\n      \"*\":\n        allow: [" + strings.Repeat("k", maxListKeyBytes+1) + "]\n", fmt.Sprintf("a key of %d bytes: at most %d", maxListKeyBytes+1, maxListKeyBytes)},
		{"schema:\n  a:\n    limits: [1, 1, 1]\n    allow: [k]\n", `l.yaml:4:5: schema.a.allow: allow and deny lists are for a "*" or pattern child: the segment that reaches a is always its name`},
	} {
		_, err := Parse("l.yaml", []byte(tc.yaml))
		var list yamlfile.ErrorList
		if !errors.As(err, &list) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q:\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}
