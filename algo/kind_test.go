package algo

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestKindsAnswerForThemselves goes over every registered kind: its
// example is valid and of its kind, its Spec builds it back and encodes as
// encoding/json would, and its Quota is the Result.Quota it decides with.
func TestKindsAnswerForThemselves(t *testing.T) {
	if len(Kinds()) != NumKinds {
		t.Fatalf("Kinds() has %d kinds, NumKinds is %d", len(Kinds()), NumKinds)
	}
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			l := k.Example()
			if l == nil {
				t.Fatal("no example")
			}
			if l.Kind() != k {
				t.Fatalf("example's kind is %v", l.Kind())
			}
			if got, err := parseKind(k.String()); err != nil || got != k {
				t.Fatalf("ParseKind(%q) = %v, %v", k.String(), got, err)
			}
			if err := l.validate(); err != nil {
				t.Fatalf("example invalid: %v", err)
			}
			spec := l.Spec()
			if spec.Algorithm != k.String() {
				t.Errorf("spec algorithm %q", spec.Algorithm)
			}
			back, err := spec.Build()
			if err != nil || !reflect.DeepEqual(back, l) {
				t.Errorf("Spec().Build() = %#v, %v; want %#v", back, err, l)
			}
			want, _ := json.Marshal(spec)
			if got := spec.AppendJSON(nil); string(got) != string(want) {
				t.Errorf("AppendJSON = %s, want %s", got, want)
			}
			var s State
			r := decideLimit(t, l, &s, 1_800_000_000_000_000, 0, false)
			q, w := l.quota()
			if q != r.Quota || q <= 0 || w <= 0 {
				t.Errorf("Quota() = %d, %v; Result.Quota %d", q, w, r.Quota)
			}
			if n, per := l.steadyRate(); n <= 0 || per <= 0 {
				t.Errorf("SteadyRate() = %d, %v", n, per)
			}
		})
	}
}

func TestParseKindUnknown(t *testing.T) {
	for _, name := range []string{"", "leaky", "GCRA"} {
		if _, err := parseKind(name); err == nil {
			t.Errorf("ParseKind(%q) accepted", name)
		}
	}
}

// TestSpecJSONEveryField: a Spec with every field set goes to JSON
// (AppendJSON, which MarshalJSON is) and back unchanged, with durations
// as Go duration strings; a bare number for a duration, and an unknown
// field, are refused.
func TestSpecJSONEveryField(t *testing.T) {
	b := int64(7)
	s := Spec{Algorithm: "x<y", Burst: 1, Count: 2, Period: 3 * time.Second, Rate: 4, Per: 5 * time.Minute, Limit: 6, Window: 7 * time.Millisecond, Interval: 8 * time.Hour, HoldFor: 13 * time.Second,
		Limits: WindowSpecs{{Name: "a\"b", Limit: 1, Window: 9 * time.Second}, {Limit: 2, Window: 10 * time.Microsecond}}, MinGap: 11 * time.Second, Buckets: &b, Mode: "nary", Slice: 12 * time.Second,
		Block: &Block{For: 14 * time.Second, Growth: 1.5, Max: time.Hour, ForgetAfter: 15 * time.Minute}, Debt: true,
		TimeZone: "Europe/Berlin", AnchorDay: 15, WeekStart: "sunday"}
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if v.Type().Field(i).Name == "Calendar" {
			continue // written as the window: below
		}
		if v.Field(i).IsZero() {
			t.Fatalf("set Spec.%s here: the round trip below checks every field", v.Type().Field(i).Name)
		}
	}
	out, err := json.Marshal(struct{ S Spec }{s})
	if err != nil || !json.Valid(out) {
		t.Fatalf("Marshal: %s, %v", out, err)
	}
	for _, want := range []string{`"period":"3s"`, `"per":"5m0s"`, `"window":"7ms"`, `"interval":"8h0m0s"`, `"window":"10µs"`, `"min_gap":"11s"`, `"slice":"12s"`, `"hold_for":"13s"`, `"block":{"for":"14s","growth":1.5,"max":"1h0m0s","forget_after":"15m0s"}`, `"debt":true`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	var back struct{ S Spec }
	if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back.S, s) {
		t.Fatalf("round trip: %+v, %v; want %+v", back.S, err, s)
	}
	// A calendar window is written as the window.
	cal := Spec{Algorithm: "fixed_window", Limit: 1, Calendar: "month", TimeZone: "Europe/Berlin", AnchorDay: 31}
	out, _ = json.Marshal(cal)
	back.S = Spec{}
	if err := json.Unmarshal(out, &back.S); err != nil || !reflect.DeepEqual(back.S, cal) || !strings.Contains(string(out), `"window":"month"`) {
		t.Fatalf("calendar round trip: %s: %+v, %v", out, back.S, err)
	}
	for _, bad := range []string{
		`{"algorithm":"gcra","burst":1,"count":2,"period":60}`,
		`{"algorithm":"gcra","burst":1,"count":2,"period":"60s","perod":"1s"}`,
		`{"algorithm":"sliding_log","limits":[{"limit":1,"window":1000}]}`,
		`{"algorithm":"sliding_log","limits":[{"limit":1,"window":"1s","size":1}]}`,
	} {
		var got Spec
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("%s was accepted as %+v", bad, got)
		}
	}
}

func TestWindowedDeniedBy(t *testing.T) {
	l := SlidingLog{Limits: []Window{{Count: 1, Window: 10e9}, {Name: "hour", Count: 5, Window: 3600e9}}}
	for by, want := range map[int]string{0: "", 1: "10s", 2: "hour", 3: "", DeniedByGap: "min_gap"} {
		if got := l.deniedBy(by); got != want {
			t.Errorf("DeniedBy(%d) = %q, want %q", by, got, want)
		}
	}
}

// TestSpecStringsAsEncodingJSON: a spec's strings are written byte for
// byte as encoding/json writes them, plain or not.
func TestSpecStringsAsEncodingJSON(t *testing.T) {
	strs := []string{"", "gcra", "Europe/Berlin", "\u2028\u2029", "é", "\xff\xfe", "a\u00e9\xffb"}
	for c := range 0x80 { // every ASCII byte alone, so that each one's way is checked
		strs = append(strs, "a"+string(rune(c))+"b")
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
	}
}
