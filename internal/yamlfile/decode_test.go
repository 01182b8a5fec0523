package yamlfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/sluicehq/sluice/internal/yamlfile/parser"
)

// futureSpec has the kinds of fields algorithms may add to algo.Spec (such
// as sliding_log's limits: [{limit, window}]): the loader decodes them by
// their tags without changes.
type futureSpec struct {
	Algorithm string        `yaml:"algorithm"`
	Limits    []windowLimit `json:"limits,omitempty" yaml:"limits,omitempty"`
	MinGap    time.Duration `yaml:"min_gap,omitempty"`
	Buckets   uint16        `json:"buckets"`
	Ratio     float64
	Strict    *bool             `yaml:"strict"`
	Labels    map[string]string `yaml:"labels"`
	Skipped   int               `yaml:"-"`
	hidden    int
}

type windowLimit struct {
	Limit  int64         `yaml:"limit"`
	Window time.Duration `yaml:"window"`
}

func decodeYAML(t *testing.T, src string, v any) ErrorList {
	t.Helper()
	f, err := parser.ParseBytes([]byte(src), 0)
	if err != nil {
		t.Fatal(err)
	}
	l := New("f.yaml")
	l.Trim = errInvalid.Error() + ": "
	l.Collect(f.Docs[0].Body, map[string]ast.Node{})
	l.Decode(f.Docs[0].Body, reflect.ValueOf(v).Elem(), "limit")
	return l.Errs
}

func TestDecodeFutureFields(t *testing.T) {
	var got futureSpec
	errs := decodeYAML(t, `
algorithm: sliding_log
limits: [{limit: 1000, window: 1h}, {limit: 10, window: 1s}]
min_gap: 10ms
buckets: 60
ratio: 0.5
strict: true
labels: {team: core}
`, &got)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	strict := true
	want := futureSpec{
		Algorithm: "sliding_log",
		Limits:    []windowLimit{{1000, time.Hour}, {10, time.Second}},
		MinGap:    10 * time.Millisecond,
		Buckets:   60, Ratio: 0.5, Strict: &strict, Labels: map[string]string{"team": "core"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	errs = decodeYAML(t, `
algorithm: sliding_log
limits: [{limit: 1000, window: 1h}, {limit: x, windw: 1s}]
buckets: -1
ratio: fast
skipped: 1
hidden: 1
labels: {a: 1}
strict: 1
`, &got)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	wantMsgs := []string{
		`f.yaml:3:45: limit.limits[1].limit: want an integer, got "x"`,
		`f.yaml:3:48: limit.limits[1].windw: unknown field "windw" (want limit or window)`,
		`f.yaml:4:10: limit.buckets: must not be negative, got -1`,
		`f.yaml:5:8: limit.ratio: want a number, got "fast"`,
		`f.yaml:6:1: limit.skipped: unknown field "skipped" (want algorithm, limits, min_gap, buckets, ratio, strict or labels)`,
		`f.yaml:7:1: limit.hidden: unknown field "hidden" (want algorithm, limits, min_gap, buckets, ratio, strict or labels)`,
		`f.yaml:8:13: limit.labels.a: want a string, got integer 1`,
		`f.yaml:9:9: limit.strict: want true or false, got integer 1`,
	}
	if errs.Sort(); !reflect.DeepEqual(msgs, wantMsgs) {
		t.Errorf("errors:\n got %s\nwant %s", strings.Join(msgs, "\n     "), strings.Join(wantMsgs, "\n     "))
	}
}

// windows reads a list of windowLimit or a mapping of names to them, as
// algo.WindowSpecs does, through a yaml.v2-style UnmarshalYAML.
type windows []windowLimit

func (w *windows) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]windowLimit
	if unmarshal(&m) == nil && m != nil {
		for _, name := range []string{"a", "b"} {
			if x, ok := m[name]; ok {
				*w = append(*w, x)
			}
		}
		return nil
	}
	var l []windowLimit
	if err := unmarshal(&l); err != nil {
		return fmt.Errorf("%w: want a list or a mapping: %v", errInvalid, err)
	}
	*w = l
	return nil
}

func TestDecodeUnmarshaler(t *testing.T) {
	type spec struct {
		W windows `yaml:"w"`
	}
	for _, tc := range []struct {
		src  string
		want windows
		errs []string
	}{
		{src: "w: [{limit: 1, window: 1s}]", want: windows{{1, time.Second}}},
		{src: "w: {b: {limit: 2, window: 2s}, a: {limit: 1, window: 1s}}", want: windows{{1, time.Second}, {2, time.Second * 2}}},
		{src: "w: [{limit: 1, window: 1s}, {limit: 2, windw: 2s}]", errs: []string{
			`f.yaml:1:40: limit.w[1].windw: unknown field "windw" (want limit or window)`,
		}},
		{src: "w: {a: {limit: 1, window: 1s}, b: {limit: x, window: 2s}}", errs: []string{
			`f.yaml:1:43: limit.w.b.limit: want an integer, got "x"`,
		}},
		{src: "w: 5", errs: []string{
			`f.yaml:1:4: limit.w: want a list or a mapping: want a list, got integer 5`,
		}},
	} {
		var got spec
		errs := decodeYAML(t, tc.src, &got)
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		if !reflect.DeepEqual(msgs, tc.errs) || tc.errs == nil && !reflect.DeepEqual(got.W, tc.want) {
			t.Errorf("%s:\n got %+v %q\nwant %+v %q", tc.src, got.W, msgs, tc.want, tc.errs)
		}
	}
}

var errInvalid = errors.New("invalid limit")

// TestReadFileBound: a file of MaxFileBytes is read; a larger one, or an
// endless one (/dev/zero, which ran `sluice validate` out of memory), is
// an error naming it.
func TestReadFileBound(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{MaxFileBytes, MaxFileBytes + 1} {
		path := filepath.Join(dir, fmt.Sprint(n))
		if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		data, err := ReadFile(path)
		if n <= MaxFileBytes && (err != nil || len(data) != n) {
			t.Errorf("%d bytes: %d, %v", n, len(data), err)
		}
		if n > MaxFileBytes && (err == nil || !strings.Contains(err.Error(), path+": larger than 4 MiB")) {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	if _, err := ReadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "/dev/zero: larger than") {
		t.Errorf("/dev/zero: %v", err)
	}
}
