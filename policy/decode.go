package policy

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/sluicehq/sluice/algo"
)

// The loader decodes limit mappings into algo.Spec by reflection, matching
// keys to the fields' yaml (else json) tag names, so that fields and
// algorithms added to algo.Spec load without changes here. Every problem is
// reported with its position, and decoding goes on to find the others.

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

// duration sets the time.Duration v from n, a Go duration string such as
// "60s" or "1h30m": a bare number, whose unit would be a guess, is an
// error. Every duration of every file is written so.
func (l *loader) duration(n ast.Node, v reflect.Value, path string) bool {
	s, ok := stringValue(n)
	if !ok {
		l.errorf(n, path, "want a duration such as \"60s\", got %s", describe(n))
		return false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.add(l.pos(n), nil, path, err.Error(), err)
		return false
	}
	v.SetInt(int64(d))
	return true
}

// decode sets v from the node n, reporting problems under path. It returns
// false if there were any.
func (l *loader) decode(n ast.Node, v reflect.Value, path string) bool {
	if l.over(n) {
		return false
	}
	n, ok := l.deref(n, path)
	if !ok {
		return false
	}
	if _, null := n.(*ast.NullNode); null && l.nullIsZero {
		return true // a field left empty: its zero value
	}
	if v.CanAddr() && v.Addr().Type().Implements(yamlUnmarshalerType) {
		return l.unmarshalYAML(n, v.Addr().Interface().(yamlUnmarshaler), path)
	}
	if v.Type() == durationType {
		return l.duration(n, v, path)
	}
	if v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType) {
		s, ok := stringValue(n)
		if !ok {
			l.errorf(n, path, "want a string, got %s", describe(n))
			return false
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			l.add(l.pos(n), nil, path, strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "), err)
			return false
		}
		return true
	}
	switch v.Kind() {
	case reflect.String:
		if s, ok := stringValue(n); ok {
			v.SetString(s)
			return true
		}
		l.errorf(n, path, "want a string, got %s", describe(n))
	case reflect.Bool:
		if b, ok := n.(*ast.BoolNode); ok && b != nil {
			v.SetBool(b.Value)
			return true
		}
		l.errorf(n, path, "want true or false, got %s", describe(n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if i, ok := n.(*ast.IntegerNode); ok && i != nil {
			if x, ok := intValue(i); ok && !v.OverflowInt(x) {
				v.SetInt(x)
				return true
			}
			l.errorf(n, path, "integer %s is out of range", nodeText(n))
			return false
		}
		l.notInteger(n, path)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if i, ok := n.(*ast.IntegerNode); ok && i != nil {
			var x uint64
			switch y := i.Value.(type) {
			case uint64:
				x = y
			case int64:
				if y < 0 {
					l.errorf(n, path, "must not be negative, got %s", nodeText(n))
					return false
				}
				x = uint64(y)
			}
			if !v.OverflowUint(x) {
				v.SetUint(x)
				return true
			}
			l.errorf(n, path, "integer %s is out of range", nodeText(n))
			return false
		}
		l.notInteger(n, path)
	case reflect.Float32, reflect.Float64:
		switch x := n.(type) {
		case *ast.IntegerNode:
			if i, ok := intValue(x); ok {
				v.SetFloat(float64(i))
				return true
			}
		case *ast.FloatNode:
			if !v.OverflowFloat(x.Value) && !math.IsNaN(x.Value) {
				v.SetFloat(x.Value)
				return true
			}
		}
		l.errorf(n, path, "want a number, got %s", describe(n))
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		if l.decode(n, e.Elem(), path) {
			v.Set(e)
			return true
		}
	case reflect.Slice:
		s, ok := n.(*ast.SequenceNode)
		if !ok || s == nil {
			l.errorf(n, path, "want a list, got %s", describe(n))
			return false
		}
		out := reflect.MakeSlice(v.Type(), len(s.Values), len(s.Values))
		ok = true
		for i, e := range s.Values {
			ok = l.decode(e, out.Index(i), path+"["+strconv.Itoa(i)+"]") && ok
		}
		if ok {
			v.Set(out)
		}
		return ok
	case reflect.Struct:
		m, ok := n.(*ast.MappingNode)
		if !ok || m == nil {
			l.errorf(n, path, "want a mapping, got %s", describe(n))
			return false
		}
		_, ok = l.decodeStruct(m, v, path)
		return ok
	case reflect.Map:
		m, ok := n.(*ast.MappingNode)
		if !ok || m == nil || v.Type().Key().Kind() != reflect.String {
			l.errorf(n, path, "want a mapping, got %s", describe(n))
			return false
		}
		out := reflect.MakeMap(v.Type())
		ok = true
		for _, e := range l.mapping(m, path, "field") {
			val := reflect.New(v.Type().Elem()).Elem()
			if l.decode(e.value, val, sub(path, e.name)) {
				out.SetMapIndex(reflect.ValueOf(e.name).Convert(v.Type().Key()), val)
			} else {
				ok = false
			}
		}
		if ok {
			v.Set(out)
		}
		return ok
	default:
		l.errorf(n, path, "cannot load a field of type %s", v.Type())
	}
	return false
}

// unmarshalYAML decodes n with a type's own UnmarshalYAML, whose unmarshal
// function decodes n as this loader does. A type may try several forms,
// such as a mapping and then a list, so the problems of each try are kept
// aside: on failure the loader reports those of the first try whose form
// fits the node (a mapping for a mapping, a list for a list), with their
// positions, or else the type's error at the node.
func (l *loader) unmarshalYAML(n ast.Node, u yamlUnmarshaler, path string) bool {
	var fit ErrorList
	err := u.UnmarshalYAML(func(target any) error {
		rv := reflect.ValueOf(target)
		if rv.Kind() != reflect.Pointer || rv.IsNil() {
			return fmt.Errorf("unmarshal wants a non-nil pointer, got %T", target)
		}
		try := &loader{name: l.name, seen: map[errKey]bool{}, aliases: l.aliases, work: l.work, tooBig: l.tooBig, nullIsZero: l.nullIsZero}
		ok := try.decode(n, rv.Elem(), path)
		l.work = try.work
		if try.tooBig && !l.tooBig {
			l.tooBig = true
			l.errorf(n, path, "policy too large: more than %d nodes and values, counting each use of an alias", maxWork)
		}
		if ok || len(try.errs) == 0 {
			return nil
		}
		if fit == nil && fits(n, rv.Type().Elem()) {
			fit = try.errs
		}
		return errors.New(try.errs[0].Msg)
	})
	if err == nil {
		return true
	}
	if len(fit) == 0 {
		l.add(l.pos(n), nil, path, strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "), err)
	}
	for _, e := range fit {
		l.add(e.Pos, nil, e.Field, e.Msg, e.Err)
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

// notInteger reports a node that is not an integer.
func (l *loader) notInteger(n ast.Node, path string) {
	if s, ok := n.(*ast.StringNode); ok && number.MatchString(s.Value) && s.Token != nil && s.Token.Type == token.StringType {
		l.errorf(n, path, "integer %s is out of range", s.Value)
		return
	}
	l.errorf(n, path, "want an integer, got %s", describe(n))
}

// decodeStruct sets the fields of the struct v from the mapping m. It
// returns the value node of each key, by field name.
func (l *loader) decodeStruct(m *ast.MappingNode, v reflect.Value, path string) (map[string]ast.Node, bool) {
	fields := fieldsOf(v.Type())
	set := map[string]ast.Node{}
	ok := true
	for _, e := range l.mapping(m, path, "field") {
		i, known := fields.index[e.name]
		if !known {
			l.errorf(e.key, sub(path, e.name), "unknown field %q (want %s)", e.name, fields.want)
			ok = false
			continue
		}
		if !l.decode(e.value, v.Field(i), sub(path, e.name)) {
			ok = false
		}
		set[e.name] = l.peek(e.value)
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

// boolean reads a true or false value.
func (l *loader) boolean(n ast.Node, path string) (bool, bool) {
	var b bool
	ok := l.decode(n, reflect.ValueOf(&b).Elem(), path)
	return b, ok
}

// str reads a string value.
func (l *loader) str(n ast.Node, path string) (string, bool) {
	var s string
	ok := l.decode(n, reflect.ValueOf(&s).Elem(), path)
	return s, ok
}

// strs reads a list of strings (one string is a list of one).
func (l *loader) strs(n ast.Node, path string) []string {
	v, ok := l.deref(n, path)
	if !ok {
		return nil
	}
	if seq, isSeq := v.(*ast.SequenceNode); isSeq {
		out := make([]string, 0, len(seq.Values))
		for i, e := range seq.Values {
			if s, ok := l.str(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				out = append(out, s)
			}
		}
		return out
	}
	if s, ok := l.str(v, path); ok {
		return []string{s}
	}
	return nil
}
