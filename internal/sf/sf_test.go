package sf

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestAppendInteger(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want string // "" for an error
	}{
		{0, "0"}, {1, "1"}, {-1, "-1"}, {42, "42"},
		{999_999_999_999_999, "999999999999999"},
		{-999_999_999_999_999, "-999999999999999"},
		{1_000_000_000_000_000, ""},
		{-1_000_000_000_000_000, ""},
		{1<<63 - 1, ""},
		{-1 << 63, ""},
	} {
		got, err := AppendInteger([]byte("x"), tc.v)
		checkAppend(t, "AppendInteger", tc.v, got, err, tc.want)
	}
}

func TestAppendString(t *testing.T) {
	for _, tc := range []struct {
		s, want string // want "" for an error
	}{
		{"", `""`},
		{"user", `"user"`},
		{"user/*/trade", `"user/*/trade"`},
		{"user/*/trade#1", `"user/*/trade#1"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{`\"`, `"\\\""`},
		{" ~", `" ~"`},
		{"it's; a=b, c", `"it's; a=b, c"`},
		{"tab\there", ""},
		{"nl\n", ""},
		{"nul\x00", ""},
		{"del\x7f", ""},
		{"é", ""},
		{"\x1f", ""},
		{"\x80", ""},
	} {
		got, err := AppendString([]byte("x"), tc.s)
		checkAppend(t, "AppendString", tc.s, got, err, tc.want)
	}
}

func TestAppendToken(t *testing.T) {
	for _, tc := range []struct {
		s, want string
	}{
		{"a", "a"},
		{"*", "*"},
		{"requests", "requests"},
		{"Content-Bytes", "Content-Bytes"},
		{"foo123/456", "foo123/456"},
		{"a:b", "a:b"},
		{"*a!#$%&'*+-.^_`|~", "*a!#$%&'*+-.^_`|~"},
		{"", ""},
		{"1a", ""},
		{"-a", ""},
		{"a b", ""},
		{"a,b", ""},
		{`a"`, ""},
		{"a;b", ""},
		{"a=b", ""},
		{"é", ""},
		{"a\x00", ""},
	} {
		got, err := AppendToken([]byte("x"), tc.s)
		checkAppend(t, "AppendToken", tc.s, got, err, tc.want)
	}
}

func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		s, want string
	}{
		{"q", "q"}, {"w", "w"}, {"qu", "qu"}, {"pk", "pk"},
		{"*", "*"}, {"a1", "a1"}, {"sluice-shadow", "sluice-shadow"},
		{"a_b.c*d-e", "a_b.c*d-e"},
		{"", ""}, {"Q", ""}, {"1a", ""}, {"a B", ""}, {"aB", ""},
		{"-a", ""}, {"_a", ""}, {"a=", ""}, {"a;", ""}, {"a/b", ""},
	} {
		got, err := AppendKey([]byte("x"), tc.s)
		checkAppend(t, "AppendKey", tc.s, got, err, tc.want)
	}
}

func TestAppendBooleanAndBytes(t *testing.T) {
	if got := string(AppendBoolean(nil, true)); got != "?1" {
		t.Errorf("true: %s", got)
	}
	if got := string(AppendBoolean(nil, false)); got != "?0" {
		t.Errorf("false: %s", got)
	}
	for _, tc := range []struct {
		p    []byte
		want string
	}{
		{nil, "::"},
		{[]byte("trial121323"), ":dHJpYWwxMjEzMjM=:"},
		{[]byte("App-999"), ":QXBwLTk5OQ==:"},
		{[]byte{0, 0xff}, ":AP8=:"},
	} {
		if got := string(AppendByteSequence(nil, tc.p)); got != tc.want {
			t.Errorf("AppendByteSequence(%q) = %s, want %s", tc.p, got, tc.want)
		}
	}
}

func TestParams(t *testing.T) {
	b := []byte(`"user"`)
	var err error
	b, err = AppendParamInteger(b, "q", 15)
	mustNot(t, err)
	b, err = AppendParamString(b, "qu", "requests")
	mustNot(t, err)
	b, err = AppendParamToken(b, "x", "tok/1")
	mustNot(t, err)
	b, err = AppendParamBoolean(b, "on", true)
	mustNot(t, err)
	b, err = AppendParamBoolean(b, "off", false)
	mustNot(t, err)
	b, err = AppendParamByteSequence(b, "pk", []byte("App-999"))
	mustNot(t, err)
	const want = `"user";q=15;qu="requests";x=tok/1;on;off=?0;pk=:QXBwLTk5OQ==:`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	items, err := parseList(string(b))
	mustNot(t, err)
	wantItems := []Item{{Val: "user", Params: []Param{
		{"q", int64(15)}, {"qu", "requests"}, {"x", Token("tok/1")}, {"on", true}, {"off", false}, {"pk", []byte("App-999")},
	}}}
	if !reflect.DeepEqual(items, wantItems) {
		t.Fatalf("parsed %#v", items)
	}

	// Every failure leaves the buffer as it was.
	for name, f := range map[string]func([]byte) ([]byte, error){
		"bad key int":     func(b []byte) ([]byte, error) { return AppendParamInteger(b, "Q", 1) },
		"big int":         func(b []byte) ([]byte, error) { return AppendParamInteger(b, "q", 1e15) },
		"bad key string":  func(b []byte) ([]byte, error) { return AppendParamString(b, "", "x") },
		"bad string":      func(b []byte) ([]byte, error) { return AppendParamString(b, "s", "a\nb") },
		"bad key token":   func(b []byte) ([]byte, error) { return AppendParamToken(b, "9", "x") },
		"bad token":       func(b []byte) ([]byte, error) { return AppendParamToken(b, "t", "9x") },
		"bad key boolean": func(b []byte) ([]byte, error) { return AppendParamBoolean(b, "a b", true) },
		"bad key bytes":   func(b []byte) ([]byte, error) { return AppendParamByteSequence(b, "K", nil) },
	} {
		got, err := f([]byte(`"p"`))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if string(got) != `"p"` {
			t.Errorf("%s: buffer changed to %q", name, got)
		}
	}
}

// TestDraftExamples writes the examples of
// draft-ietf-httpapi-ratelimit-headers-10 and parses them back.
func TestDraftExamples(t *testing.T) {
	var b []byte
	for _, p := range []struct {
		name string
		q, w int64
	}{{"burst", 100, 60}, {"daily", 1000, 86400}} {
		b = AppendMemberSeparator(b)
		b, _ = AppendString(b, p.name)
		b, _ = AppendParamInteger(b, "q", p.q)
		b, _ = AppendParamInteger(b, "w", p.w)
	}
	if got, want := string(b), `"burst";q=100;w=60, "daily";q=1000;w=86400`; got != want {
		t.Errorf("policy: got %s, want %s", got, want)
	}
	b = b[:0]
	b, _ = AppendString(b, "default")
	b, _ = AppendParamInteger(b, "r", 300000000)
	b, _ = AppendParamInteger(b, "t", 60)
	b, _ = AppendParamByteSequence(b, "pk", []byte("App-999"))
	if got, want := string(b), `"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`; got != want {
		t.Errorf("ratelimit: got %s, want %s", got, want)
	}
	if _, err := parseList(string(b)); err != nil {
		t.Error(err)
	}
}

// TestParserRejects makes sure the test parser is strict, so that the
// round trips below mean something.
func TestParserRejects(t *testing.T) {
	for _, s := range []string{
		`"a`, `"a\b"`, "\"a\x01\"", `1234567890123456`, `a;Q=1`, `a,`, `a,,b`, `?2`,
		`:abc`, `:ab$=:`, `1.5`, `a;=1`, `"a" "b"`, `@`,
	} {
		if items, err := parseList(s); err == nil {
			t.Errorf("parseList(%q) = %#v, want an error", s, items)
		}
	}
}

// FuzzString: every string either fails to encode and has a byte outside
// printable ASCII, or encodes to a String that parses back to itself.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "user/*/trade", `a"b\c`, "é", "\x7f", " ", `\\""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := AppendString(nil, s)
		printable := true
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				printable = false
			}
		}
		if err != nil {
			if printable {
				t.Fatalf("AppendString(%q) failed: %v", s, err)
			}
			if b != nil {
				t.Fatalf("AppendString(%q) failed but wrote %q", s, b)
			}
			return
		}
		if !printable {
			t.Fatalf("AppendString(%q) = %s, want an error", s, b)
		}
		b, _ = AppendParamString(b, "n", s)
		items, err := parseList(string(b))
		if err != nil {
			t.Fatalf("%s does not parse: %v", b, err)
		}
		if len(items) != 1 || items[0].Val != s || len(items[0].Params) != 1 || items[0].Params[0].Val != s {
			t.Fatalf("%s parsed as %#v", b, items)
		}
	})
}

// FuzzList builds a List of Items from fuzzed names, tokens, keys and
// integers and checks that whatever encodes parses back equal.
func FuzzList(f *testing.F) {
	f.Add("user/*", "requests", "q", int64(15), "w", int64(60))
	f.Add("a\"b", "T", "Q", int64(-1), "sluice-x", int64(1e15))
	f.Fuzz(func(t *testing.T, name, tok, k1 string, v1 int64, k2 string, v2 int64) {
		var b []byte
		var want []Item
		for i := 0; i < 2; i++ {
			n := len(b)
			b = AppendMemberSeparator(b)
			var err error
			var it Item
			if i == 0 {
				b, err = AppendString(b, name)
				it.Val = name
			} else {
				b, err = AppendToken(b, tok)
				it.Val = Token(tok)
			}
			if err != nil {
				b = b[:n]
				continue
			}
			if b2, err := AppendParamInteger(b, k1, v1); err == nil {
				b = b2
				it.Params = append(it.Params, Param{k1, v1})
			}
			if b2, err := AppendParamToken(b, k2, tok); err == nil {
				b = b2
				if k2 == k1 && len(it.Params) > 0 {
					it.Params[0].Val = Token(tok) // a repeated key keeps the first position, last value
				} else {
					it.Params = append(it.Params, Param{k2, Token(tok)})
				}
			}
			if b2, err := AppendParamInteger(b, "v", v2); err == nil {
				b = b2
				replaced := false
				for j := range it.Params {
					if it.Params[j].Key == "v" {
						it.Params[j].Val, replaced = v2, true
					}
				}
				if !replaced {
					it.Params = append(it.Params, Param{"v", v2})
				}
			}
			want = append(want, it)
		}
		got, err := parseList(string(b))
		if err != nil {
			t.Fatalf("%q does not parse: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q parsed as %#v, want %#v", b, got, want)
		}
	})
}

func TestNoAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	n := testing.AllocsPerRun(100, func() {
		b := buf[:0]
		b = AppendMemberSeparator(b)
		b, _ = AppendString(b, "user/*/trade#1")
		b, _ = AppendParamInteger(b, "q", 1000)
		b, _ = AppendParamInteger(b, "w", 3600)
		b = AppendMemberSeparator(b)
		b, _ = AppendToken(b, "abc")
		_ = b
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

func checkAppend(t *testing.T, fn string, in any, got []byte, err error, want string) {
	t.Helper()
	if want == "" {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s(%q): err = %v, want ErrInvalid", fn, in, err)
		}
		if string(got) != "x" {
			t.Errorf("%s(%q): buffer changed to %q on error", fn, in, got)
		}
		return
	}
	if err != nil {
		t.Errorf("%s(%q): %v", fn, in, err)
		return
	}
	if !bytes.Equal(got, []byte("x"+want)) {
		t.Errorf("%s(%q) = %s, want %s", fn, in, strings.TrimPrefix(string(got), "x"), want)
	}
}

func mustNot(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
