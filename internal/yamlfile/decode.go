package yamlfile

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// yamlUnmarshaler is the custom unmarshaler of yaml.v2 and goccy/go-yaml,
// which a type can have without importing a YAML package.
type yamlUnmarshaler interface {
	UnmarshalYAML(unmarshal func(any) error) error
}

var (
	yamlUnmarshalerType = reflect.TypeFor[yamlUnmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[time.Duration]()
	number              = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)
)

// Duration sets the time.Duration v from n, a Go duration string such as
// "60s" or "1h30m": a bare number, whose unit would be a guess, is an
// error. Every duration of every file is written so.
func (l *Loader) Duration(n ast.Node, v reflect.Value, path string) bool {
	s, ok := StringValue(n)
	if !ok {
		l.Errorf(n, path, "want a duration such as \"60s\", got %s", Describe(n))
		return false
	}
	d, err := ParseDuration(s)
	if err != nil {
		l.Add(l.Pos(n), nil, path, err.Error(), err)
		return false
	}
	v.SetInt(int64(d))
	return true
}

// DidYouMean returns " (did you mean <prefix><name>?)" for the name of
// names closest to s (at most 2 edits, or s a prefix of it), or "": the
// hint of every misspelt flag, command and config value.
func DidYouMean(s string, names []string, prefix string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(s, n)
		if strings.HasPrefix(n, s) && len(s) >= 3 {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && n < best {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + prefix + best + "?)"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// ParseDuration is time.ParseDuration whose error says how to write what
// was meant: "1 minute" is `write 1m`, "2 days" `write 48h`.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	f := strings.Fields(strings.ToLower(s))
	if len(f) == 1 { // "10min": split the number from its word
		i := strings.IndexFunc(f[0], func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i > 0 {
			f = []string{f[0][:i], f[0][i:]}
		}
	}
	if len(f) == 2 {
		n, perr := strconv.ParseFloat(f[0], 64)
		unit := strings.TrimSuffix(f[1], "s")
		hours := map[string]float64{"day": 24, "d": 24, "week": 168, "w": 168}[unit]
		short := map[string]string{"nanosecond": "ns", "microsecond": "us", "millisecond": "ms", "milli": "ms", "msec": "ms",
			"second": "s", "sec": "s", "minute": "m", "min": "m", "hour": "h", "hr": "h"}[unit]
		switch {
		case perr != nil:
		case short != "":
			return 0, fmt.Errorf("%w (write %s%s)", err, f[0], short)
		case hours > 0:
			return 0, fmt.Errorf("%w (write %sh: a duration's largest unit is the hour)", err, strconv.FormatFloat(n*hours, 'f', -1, 64))
		}
	}
	return 0, fmt.Errorf("%w (write a duration such as 500ms, 10s, 1m or 24h)", err)
}

// Decode sets v from the node n, reporting problems under path. It returns
// false if there were any.
func (l *Loader) Decode(n ast.Node, v reflect.Value, path string) bool {
	if l.Over(n) {
		return false
	}
	if l.depth >= maxDecodeDepth {
		l.Errorf(n, path, "nested deeper than %d, counting the nodes aliases stand for", maxDecodeDepth)
		return false
	}
	l.depth++
	defer func() { l.depth-- }()
	n, ok := l.Deref(n, path)
	if !ok {
		return false
	}
	if _, null := n.(*ast.NullNode); null && l.NullIsZero {
		return true // a field left empty: its zero value
	}
	if v.CanAddr() && v.Addr().Type().Implements(yamlUnmarshalerType) {
		return l.UnmarshalYAML(n, v.Addr().Interface().(yamlUnmarshaler), path)
	}
	if v.Type() == durationType {
		return l.Duration(n, v, path)
	}
	if v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType) {
		return l.text(n, v.Addr().Interface().(encoding.TextUnmarshaler), path)
	}
	switch v.Kind() {
	case reflect.String, reflect.Bool:
		return l.scalar(n, v, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return l.integer(n, v, path)
	case reflect.Float32, reflect.Float64:
		return l.float(n, v, path)
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		if l.Decode(n, e.Elem(), path) {
			v.Set(e)
			return true
		}
		return false
	case reflect.Slice:
		return l.list(n, v, path)
	case reflect.Struct:
		m, ok := n.(*ast.MappingNode)
		if !ok || m == nil {
			l.Errorf(n, path, "want a mapping, got %s", Describe(n))
			return false
		}
		_, ok = l.DecodeStruct(m, v, path)
		return ok
	case reflect.Map:
		return l.mapOf(n, v, path)
	}
	l.Errorf(n, path, "cannot load a field of type %s", v.Type())
	return false
}

// text decodes a string with a type's own UnmarshalText.
func (l *Loader) text(n ast.Node, u encoding.TextUnmarshaler, path string) bool {
	s, ok := StringValue(n)
	if !ok {
		l.Errorf(n, path, "want a string, got %s", Describe(n))
		return false
	}
	if err := u.UnmarshalText([]byte(s)); err != nil {
		l.Add(l.Pos(n), nil, path, strings.TrimPrefix(err.Error(), l.Trim), err)
		return false
	}
	return true
}

// scalar decodes a string or a boolean.
func (l *Loader) scalar(n ast.Node, v reflect.Value, path string) bool {
	if v.Kind() == reflect.String {
		if s, ok := StringValue(n); ok {
			v.SetString(s)
			return true
		}
		l.Errorf(n, path, "want a string, got %s", Describe(n))
		return false
	}
	if b, ok := n.(*ast.BoolNode); ok && b != nil {
		v.SetBool(b.Value)
		return true
	}
	l.Errorf(n, path, "want true or false, got %s", Describe(n))
	return false
}

// integer decodes a signed or unsigned integer that fits v.
func (l *Loader) integer(n ast.Node, v reflect.Value, path string) bool {
	i, ok := n.(*ast.IntegerNode)
	if !ok || i == nil {
		l.NotInteger(n, path)
		return false
	}
	if v.CanInt() {
		if x, ok := IntValue(i); ok && !v.OverflowInt(x) {
			v.SetInt(x)
			return true
		}
		l.Errorf(n, path, "integer %s is out of range", NodeText(n))
		return false
	}
	var x uint64
	switch y := i.Value.(type) {
	case uint64:
		x = y
	case int64:
		if y < 0 {
			l.Errorf(n, path, "must not be negative, got %s", NodeText(n))
			return false
		}
		x = uint64(y)
	}
	if !v.OverflowUint(x) {
		v.SetUint(x)
		return true
	}
	l.Errorf(n, path, "integer %s is out of range", NodeText(n))
	return false
}

// float decodes a number.
func (l *Loader) float(n ast.Node, v reflect.Value, path string) bool {
	switch x := n.(type) {
	case *ast.IntegerNode:
		if i, ok := IntValue(x); ok {
			v.SetFloat(float64(i))
			return true
		}
	case *ast.FloatNode:
		if !v.OverflowFloat(x.Value) && !math.IsNaN(x.Value) {
			v.SetFloat(x.Value)
			return true
		}
	}
	l.Errorf(n, path, "want a number, got %s", Describe(n))
	return false
}

// list decodes a sequence into a slice; v is set only if every element
// decodes.
func (l *Loader) list(n ast.Node, v reflect.Value, path string) bool {
	s, ok := n.(*ast.SequenceNode)
	if !ok || s == nil {
		l.Errorf(n, path, "want a list, got %s", Describe(n))
		return false
	}
	out := reflect.MakeSlice(v.Type(), len(s.Values), len(s.Values))
	ok = true
	for i, e := range s.Values {
		ok = l.Decode(e, out.Index(i), path+"["+strconv.Itoa(i)+"]") && ok
	}
	if ok {
		v.Set(out)
	}
	return ok
}

// mapOf decodes a mapping into a map with string keys; v is set only if
// every value decodes.
func (l *Loader) mapOf(n ast.Node, v reflect.Value, path string) bool {
	m, ok := n.(*ast.MappingNode)
	if !ok || m == nil || v.Type().Key().Kind() != reflect.String {
		l.Errorf(n, path, "want a mapping, got %s", Describe(n))
		return false
	}
	out := reflect.MakeMap(v.Type())
	ok = true
	for _, e := range l.Mapping(m, path, "field") {
		val := reflect.New(v.Type().Elem()).Elem()
		if l.Decode(e.Value, val, Sub(path, e.Name)) {
			out.SetMapIndex(reflect.ValueOf(e.Name).Convert(v.Type().Key()), val)
		} else {
			ok = false
		}
	}
	if ok {
		v.Set(out)
	}
	return ok
}

// UnmarshalYAML decodes n with a type's own UnmarshalYAML, whose unmarshal
// function decodes n as this loader does. A type may try several forms,
// such as a mapping and then a list, so the problems of each try are kept
// aside: on failure the loader reports those of the first try whose form
// fits the node (a mapping for a mapping, a list for a list), with their
// positions, or else the type's error at the node.
func (l *Loader) UnmarshalYAML(n ast.Node, u yamlUnmarshaler, path string) bool {
	var fit ErrorList
	err := u.UnmarshalYAML(func(target any) error {
		rv := reflect.ValueOf(target)
		if rv.Kind() != reflect.Pointer || rv.IsNil() {
			return fmt.Errorf("unmarshal wants a non-nil pointer, got %T", target)
		}
		try := &Loader{Name: l.Name, seen: map[errKey]bool{}, aliases: l.aliases, Work: l.Work, TooBig: l.TooBig, NullIsZero: l.NullIsZero, Trim: l.Trim, depth: l.depth, MaxWork: l.MaxWork}
		ok := try.Decode(n, rv.Elem(), path)
		l.Work = try.Work
		if try.TooBig && !l.TooBig {
			l.TooBig = true
			l.Errorf(n, path, "file too large: more than %d nodes and values, counting each use of an alias", l.maxWork())
		}
		if ok || len(try.Errs) == 0 {
			return nil
		}
		if fit == nil && fits(n, rv.Type().Elem()) {
			fit = try.Errs
		}
		return errors.New(try.Errs[0].Msg)
	})
	if err == nil {
		return true
	}
	if len(fit) == 0 {
		l.Add(l.Pos(n), nil, path, strings.TrimPrefix(err.Error(), l.Trim), err)
	}
	for _, e := range fit {
		l.Add(e.Pos, nil, e.Field, e.Msg, e.Err)
	}
	return false
}

// fits reports whether a node has the form a type decodes from.
func fits(n ast.Node, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.(type) {
	case *ast.MappingNode:
		return t.Kind() == reflect.Map || t.Kind() == reflect.Struct
	case *ast.SequenceNode:
		return t.Kind() == reflect.Slice || t.Kind() == reflect.Array
	}
	switch t.Kind() {
	case reflect.Map, reflect.Struct, reflect.Slice, reflect.Array:
		return false
	}
	return true
}

// NotInteger reports a node that is not an integer.
func (l *Loader) NotInteger(n ast.Node, path string) {
	if s, ok := OutOfRange(n); ok {
		l.Errorf(n, path, "integer %s is out of range", s)
		return
	}
	l.Errorf(n, path, "want an integer, got %s", Describe(n))
}

// OutOfRange returns the text of an integer too large for the YAML parser,
// which then reads it as a string (unquoted, so not one the file meant).
func OutOfRange(n ast.Node) (string, bool) {
	s, ok := n.(*ast.StringNode)
	if !ok || s == nil || s.Token == nil || s.Token.Type != token.StringType || !number.MatchString(s.Value) {
		return "", false
	}
	return s.Value, true
}

// DecodeStruct sets the fields of the struct v from the mapping m. It
// returns the value node of each key, by field name.
func (l *Loader) DecodeStruct(m *ast.MappingNode, v reflect.Value, path string) (map[string]ast.Node, bool) {
	fields := fieldsOf(v.Type())
	set := map[string]ast.Node{}
	ok := true
	for _, e := range l.Mapping(m, path, "field") {
		i, known := fields.index[e.Name]
		if !known {
			l.Errorf(e.Key, Sub(path, e.Name), "unknown field %q (want %s)", e.Name, fields.want)
			ok = false
			continue
		}
		if !l.Decode(e.Value, v.Field(i), Sub(path, e.Name)) {
			ok = false
		} else if one := v.Type().Field(i).Tag.Get("oneof"); one != "" && v.Field(i).Kind() == reflect.String &&
			!slices.Contains(strings.Fields(one), v.Field(i).String()) {
			// A field whose tag lists its values: one of them, or an
			// error where the file writes it.
			l.Errorf(e.Value, Sub(path, e.Name), "want one of %s, got %q%s", strings.Join(strings.Fields(one), ", "), v.Field(i).String(), DidYouMean(v.Field(i).String(), strings.Fields(one), ""))
			ok = false
		}
		set[e.Name] = l.Peek(e.Value)
	}
	return set, ok
}

// structFields are a struct type's fields by YAML name.
type structFields struct {
	index map[string]int
	want  string // the names, for messages
}

var fieldCache sync.Map // reflect.Type → *structFields

// fieldsOf returns the fields of a struct type by their yaml tag name, else
// their json tag name, else their lowercased Go name.
func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{index: map[string]int{}}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name := tagName(sf.Tag.Get("yaml"))
		if name == "" {
			name = tagName(sf.Tag.Get("json"))
		}
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		if _, dup := f.index[name]; !dup {
			f.index[name] = i
			names = append(names, name)
		}
	}
	switch len(names) {
	case 0:
		f.want = "no fields"
	case 1:
		f.want = names[0]
	default:
		f.want = strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	fieldCache.Store(t, f)
	return f
}

func tagName(tag string) string {
	name, _, _ := strings.Cut(tag, ",")
	return name
}

// Bool reads a true or false value.
func (l *Loader) Bool(n ast.Node, path string) (bool, bool) {
	var b bool
	ok := l.Decode(n, reflect.ValueOf(&b).Elem(), path)
	return b, ok
}

// Str reads a string value.
func (l *Loader) Str(n ast.Node, path string) (string, bool) {
	var s string
	ok := l.Decode(n, reflect.ValueOf(&s).Elem(), path)
	return s, ok
}

// Strs reads a list of strings (one string is a list of one).
func (l *Loader) Strs(n ast.Node, path string) []string {
	v, ok := l.Deref(n, path)
	if !ok {
		return nil
	}
	if seq, isSeq := v.(*ast.SequenceNode); isSeq {
		out := make([]string, 0, len(seq.Values))
		for i, e := range seq.Values {
			if s, ok := l.Str(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				out = append(out, s)
			}
		}
		return out
	}
	if s, ok := l.Str(v, path); ok {
		return []string{s}
	}
	return nil
}
