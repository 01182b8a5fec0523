package sf

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

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
		if tc.want == "" {
			if !errors.Is(err, ErrInvalid) || string(got) != "x" {
				t.Errorf("AppendString(%q) = %q, %v; want the buffer unchanged and ErrInvalid", tc.s, got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, []byte("x"+tc.want)) {
			t.Errorf("AppendString(%q) = %s, %v; want %s", tc.s, strings.TrimPrefix(string(got), "x"), err, tc.want)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"q", "w", "qu", "pk", "*", "a1", "sluice-shadow", "a_b.c*d-e"} {
		if err := ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "Q", "1a", "a B", "aB", "-a", "_a", "a=", "a;", "a/b"} {
		if err := ValidKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidKey(%q) = %v, want ErrInvalid", k, err)
		}
	}
}

// FuzzString: every string either fails to encode and has a byte outside
// printable ASCII, leaving the buffer as it was, or encodes to an RFC 9651
// String (printable ASCII between quotes, '"' and '\' escaped and nothing
// else) that reads back to itself.
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
			if printable || b != nil {
				t.Fatalf("AppendString(%q) = %q, %v", s, b, err)
			}
			return
		}
		if !printable {
			t.Fatalf("AppendString(%q) = %s, want an error", s, b)
		}
		if got, ok := readString(b); !ok || got != s {
			t.Fatalf("%s reads back as %q (%v), want %q", b, got, ok, s)
		}
	})
}

// readString reads an RFC 9651 String (§4.2.5), strictly.
func readString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	var out []byte
	for i := 1; i < len(b)-1; i++ {
		c := b[i]
		switch {
		case c == '\\':
			i++
			if i == len(b)-1 || b[i] != '"' && b[i] != '\\' {
				return "", false
			}
			out = append(out, b[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			out = append(out, c)
		}
	}
	return string(out), true
}

func TestNoAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	n := testing.AllocsPerRun(100, func() {
		b, _ := AppendString(buf[:0], "user/*/trade#1")
		_ = b
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
