package algo

import (
	"encoding/json"
	"reflect"
	"testing"
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
			if got, err := ParseKind(k.String()); err != nil || got != k {
				t.Fatalf("ParseKind(%q) = %v, %v", k.String(), got, err)
			}
			if err := l.Validate(); err != nil {
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
			r := l.Decide(&s, 1_800_000_000_000_000, 0, false)
			q, w := l.Quota()
			if q != r.Quota || q <= 0 || w <= 0 {
				t.Errorf("Quota() = %d, %v; Result.Quota %d", q, w, r.Quota)
			}
			if n, per := l.SteadyRate(); n <= 0 || per <= 0 {
				t.Errorf("SteadyRate() = %d, %v", n, per)
			}
		})
	}
}

func TestParseKindUnknown(t *testing.T) {
	for _, name := range []string{"", "leaky", "GCRA"} {
		if _, err := ParseKind(name); err == nil {
			t.Errorf("ParseKind(%q) accepted", name)
		}
	}
}

func TestSpecAppendJSONEveryField(t *testing.T) {
	b := int64(7)
	s := Spec{Algorithm: "x<y", Burst: 1, Count: 2, Period: 3, Rate: 4, Per: 5, Limit: 6, Window: 7, Interval: 8,
		Limits: WindowSpecs{{Name: "a\"b", Limit: 1, Window: 9}, {Limit: 2, Window: 10}}, MinGap: 11, Buckets: &b, Mode: "nary", Slice: 12}
	want, _ := json.Marshal(s)
	if got := s.AppendJSON(nil); string(got) != string(want) {
		t.Errorf("AppendJSON = %s, want %s", got, want)
	}
}

func TestWindowedDeniedBy(t *testing.T) {
	l := SlidingLog{Limits: []Window{{Limit: 1, Window: 10e9}, {Name: "hour", Limit: 5, Window: 3600e9}}}
	for by, want := range map[int]string{0: "", 1: "10s", 2: "hour", 3: "", DeniedByGap: "min_gap"} {
		if got := l.DeniedBy(by); got != want {
			t.Errorf("DeniedBy(%d) = %q, want %q", by, got, want)
		}
	}
}
