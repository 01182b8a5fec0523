package httplimit_test

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

func TestIPKey(t *testing.T) {
	proxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8:ffff::/48"),
		netip.MustParsePrefix("192.0.2.1/32"),
	}
	for _, tc := range []struct {
		name    string
		remote  string
		header  string // IPKey.Header
		values  []string
		trusted bool // use proxies
		want    string
		wantErr bool
	}{
		{name: "peer v4", remote: "198.51.100.7:4711", want: "198.51.100.7"},
		{name: "peer v6", remote: "[2001:db8::7]:4711", want: "2001:db8::7"},
		{name: "peer v6 long form", remote: "[2001:DB8:0:0:0:0:0:7]:1", want: "2001:db8::7"},
		{name: "peer v6 zone", remote: "[fe80::1%eth0]:1", want: "fe80::1"},
		{name: "peer v4-mapped", remote: "[::ffff:198.51.100.7]:1", want: "198.51.100.7"},
		{name: "peer without port", remote: "198.51.100.7", want: "198.51.100.7"},
		{name: "peer not an address", remote: "@", wantErr: true},
		{name: "peer empty", remote: "", wantErr: true},

		{name: "no trusted proxies: header ignored", remote: "10.0.0.1:1",
			values: []string{"203.0.113.9"}, want: "10.0.0.1"},
		{name: "spoof from untrusted peer ignored", remote: "198.51.100.7:1", trusted: true,
			values: []string{"203.0.113.9"}, want: "198.51.100.7"},
		{name: "trusted peer", remote: "10.0.0.1:1", trusted: true,
			values: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "client-chosen left part ignored", remote: "10.0.0.1:1", trusted: true,
			values: []string{"1.1.1.1, 8.8.8.8, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "chain of trusted proxies", remote: "10.0.0.1:1", trusted: true,
			values: []string{"203.0.113.9, 10.1.1.1, 192.0.2.1"}, want: "203.0.113.9"},
		{name: "spoofed trusted entry left of the client", remote: "10.0.0.1:1", trusted: true,
			values: []string{"10.9.9.9, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "several header lines", remote: "10.0.0.1:1", trusted: true,
			values: []string{"1.1.1.1, 203.0.113.9", "10.2.2.2"}, want: "203.0.113.9"},
		{name: "all trusted: leftmost", remote: "10.0.0.1:1", trusted: true,
			values: []string{"10.3.3.3, 10.2.2.2"}, want: "10.3.3.3"},
		{name: "trusted peer, no header", remote: "10.0.0.1:1", trusted: true, want: "10.0.0.1"},
		{name: "garbage stops the walk", remote: "10.0.0.1:1", trusted: true,
			values: []string{"203.0.113.9, garbage, 10.2.2.2"}, want: "10.2.2.2"},
		{name: "entries with ports and spaces", remote: "10.0.0.1:1", trusted: true,
			values: []string{" 1.1.1.1 ,  203.0.113.9:5555 , [2001:db8:ffff::1]:80 "}, want: "203.0.113.9"},
		{name: "empty elements skipped", remote: "10.0.0.1:1", trusted: true,
			values: []string{"203.0.113.9,,"}, want: "203.0.113.9"},
		{name: "trusted v6 proxy", remote: "[2001:db8:ffff::2]:1", trusted: true,
			values: []string{"2001:DB8::99"}, want: "2001:db8::99"},
		{name: "v4-mapped trusted proxy", remote: "[::ffff:10.0.0.1]:1", trusted: true,
			values: []string{"203.0.113.9"}, want: "203.0.113.9"},

		{name: "Forwarded", remote: "10.0.0.1:1", trusted: true, header: "forwarded",
			values: []string{`for=1.1.1.1, for=203.0.113.9;proto=https;by=10.0.0.1`}, want: "203.0.113.9"},
		{name: "Forwarded quoted v6 with port", remote: "10.0.0.1:1", trusted: true, header: "Forwarded",
			values: []string{`For="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::17"},
		{name: "Forwarded chain", remote: "10.0.0.1:1", trusted: true, header: "Forwarded",
			values: []string{`for=203.0.113.9, for=10.5.5.5`}, want: "203.0.113.9"},
		{name: "Forwarded obfuscated stops", remote: "10.0.0.1:1", trusted: true, header: "Forwarded",
			values: []string{`for=203.0.113.9, for=_hidden, for=10.5.5.5`}, want: "10.5.5.5"},
		{name: "Forwarded ignores X-Forwarded-For", remote: "10.0.0.1:1", trusted: true, header: "Forwarded",
			want: "10.0.0.1"},
		{name: "Forwarded from untrusted peer", remote: "198.51.100.7:1", trusted: true, header: "Forwarded",
			values: []string{`for=203.0.113.9`}, want: "198.51.100.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := httplimit.IPKey{Header: tc.header}
			if tc.trusted {
				k.TrustedProxies = proxies
			}
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			name := "X-Forwarded-For"
			if tc.header != "" {
				name = http.CanonicalHeaderKey(tc.header)
			}
			for _, v := range tc.values {
				r.Header.Add(name, v)
			}
			if tc.name == "Forwarded ignores X-Forwarded-For" {
				r.Header.Set("X-Forwarded-For", "203.0.113.9")
			}
			got, err := k.Key(r)
			if tc.wantErr {
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Fatalf("got %q, %v; want ErrNoKey", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestSpoofedForwardedFor: through the middleware, an untrusted client
// that varies X-Forwarded-For still hits one bucket, while clients behind
// a trusted proxy get one bucket each.
func TestSpoofedForwardedFor(t *testing.T) {
	c := newChecker(mustPolicy(t, testPolicy), memoryStore(t), nil)
	h := httplimit.New(c, httplimit.Options{
		Timeout: testTimeout,
		Key:     httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}.Key,
		Path: func(r *http.Request, key string, p []string) []string {
			return append(p, "once", key) // a gate: one request per key
		},
	}).Wrap(okHandler)

	if w := do(h, "GET", "/", map[string]string{"X-Forwarded-For": "1.1.1.1"}, "198.51.100.7:1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	if w := do(h, "GET", "/", map[string]string{"X-Forwarded-For": "2.2.2.2"}, "198.51.100.7:2"); w.Code != 429 {
		t.Fatalf("spoofed second: %d, want 429: the header must be ignored", w.Code)
	}
	for _, client := range []string{"203.0.113.1", "203.0.113.2"} {
		if w := do(h, "GET", "/", map[string]string{"X-Forwarded-For": client}, "10.0.0.1:1"); w.Code != 200 {
			t.Fatalf("%s behind the proxy: %d", client, w.Code)
		}
	}
	if w := do(h, "GET", "/", map[string]string{"X-Forwarded-For": "203.0.113.1"}, "10.0.0.2:1"); w.Code != 429 {
		t.Fatalf("repeat behind the proxy: %d, want 429", w.Code)
	}
}

func TestIPKeyAllocs(t *testing.T) {
	k := httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 10.1.1.1")
	if n := testing.AllocsPerRun(100, func() { k.Key(r) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
