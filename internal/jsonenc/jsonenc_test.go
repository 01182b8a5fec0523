package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "tab\tnl\nrc\r", "\x00\x1f", "<a&b>", "é€😀", "bad\xffutf8\xc3", "\u2028\u2029", "x\xe2\x80"} {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
		if got := AppendString(nil, []byte(s)); string(got) != string(want) {
			t.Errorf("AppendString([]byte %q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a<b>\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}
