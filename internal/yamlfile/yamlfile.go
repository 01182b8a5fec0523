// Package yamlfile reads the YAML files Sluice reads (limits.yaml,
// sluice.yaml, envoyproxy/ratelimit's configs) as one toolkit: anchors and
// aliases followed (and bounded), merge keys, duplicate keys refused, a
// struct decoded by reflection with every problem reported at its
// position, in one format: "file:line:col: field: message".
package yamlfile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
	"github.com/sluicehq/sluice/internal/yamlfile/parser"
)

// maxWork bounds the nodes and values compiled from one file, counting each
// use of an alias anew, so that a small file cannot expand without end
// (each costs the policy about 1.5 KB): more than 40,000 of Envoy's
// descriptors, or a limits.yaml of 80,000 nodes.
const maxWork = 400_000

// maxDecodeDepth bounds the nesting Decode follows, aliases followed: the
// parser's bound, twice over.
const maxDecodeDepth = 2 * parser.MaxDepth

// ReadFile reads the file at path, of at most MaxFileBytes: every YAML
// file Sluice reads goes through it, so that a huge or endless file (a
// device, a pipe) is an error, not a process out of memory.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	switch {
	case err != nil:
		return nil, err
	case len(data) > MaxFileBytes:
		return nil, fmt.Errorf("%s: larger than %d MiB", path, MaxFileBytes>>20)
	}
	return data, nil
}

// A Loader reads one YAML file, collecting every problem it finds, each
// with its position, and going on to find the others.
type Loader struct {
	Name    string                      // the file's name, for positions
	Errs    ErrorList                   // every problem found
	seen    map[errKey]bool             // problems reported, to report each once
	aliases map[*ast.AliasNode]ast.Node // what each alias stands for
	Work    int                         // nodes and values read, bounded by MaxWork
	TooBig  bool                        // Work passed MaxWork
	// MaxWork bounds Work: maxWork when 0. A tree built by code (the xDS
	// client's) is bounded by its builder and may take more.
	MaxWork int
	depth   int // Decode calls open
	// NullIsZero leaves a field whose value is null at its zero value
	// (Decode), as YAML libraries do; a limits.yaml reports it.
	NullIsZero bool
	// Trim is a prefix left out of the messages of a field type's own
	// errors (UnmarshalText), such as a package's "invalid limit: ".
	Trim string
}

// New returns a Loader of the file name.
func New(name string) *Loader {
	return &Loader{Name: name, seen: map[errKey]bool{}, aliases: map[*ast.AliasNode]ast.Node{}}
}

type errKey struct {
	pos Position
	msg string
}

// An Entry is one key and value of a mapping.
type Entry struct {
	Name  string
	Key   ast.Node
	Value ast.Node
}

// Decode decodes the YAML file name's data into v, a pointer to a struct,
// as the policy loader decodes limits: keys match the fields' yaml (else
// json) tags, a field's type may have its own UnmarshalYAML or
// UnmarshalText, a null value leaves its field as it was, an unknown
// field is an error, and every problem is
// reported, each with its position. The error is an ErrorList, in the one
// format of every file Sluice reads (limits.yaml, sluice.yaml, Envoy's
// configs): "file:line:col: field: message". An empty file leaves v as it
// was.
func Decode(name string, data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("yamlfile: Decode wants a non-nil pointer, got %T", v)
	}
	l := New(name)
	l.NullIsZero = true
	body, ok := l.Parse(data)
	if !ok {
		return l.Errs
	}
	if body != nil && len(l.Errs) == 0 {
		if _, null := body.(*ast.NullNode); !null {
			l.Decode(body, rv.Elem(), "")
		}
	}
	if len(l.Errs) > 0 {
		l.Errs.Sort()
		return l.Errs
	}
	return nil
}

// Parse parses data and returns the body of its one document (nil for
// none), having collected its anchors; a second document is an error.
// ok is false when data is not YAML, or passes a bound of scan (size,
// depth, tokens), which is checked before the parser runs.
func (l *Loader) Parse(data []byte) (body ast.Node, ok bool) {
	if pos, msg := scan(data); msg != "" {
		pos.Filename = l.Name
		l.Add(pos, nil, "", msg, nil)
		return nil, false
	}
	f, err := parseYAML(data)
	if err != nil {
		l.Syntax(err)
		return nil, false
	}
	anchors := map[string]ast.Node{}
	for i, doc := range f.Docs {
		if doc == nil {
			continue
		}
		if i == 0 {
			body = doc.Body
		} else if doc.Body != nil {
			l.Errorf(doc, "", "more than one YAML document (only one is allowed)")
		}
		l.Collect(doc.Body, anchors)
	}
	return body, true
}

// parseYAML parses data, allowing duplicate keys so that the loader can
// report them all, each with its position.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

// Syntax reports a YAML parser error.
func (l *Loader) Syntax(err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		l.Add(Position{l.Name, 1, 1}, ye.GetToken(), "", "YAML syntax: "+ye.GetMessage(), err)
		return
	}
	l.Add(Position{l.Name, 1, 1}, nil, "", err.Error(), err)
}

// Collect records, in the order of the file, what each alias stands for:
// the last anchor of its name before it. An anchor is recorded after its
// own value, so that no alias can refer to a node that contains it.
func (l *Loader) Collect(n ast.Node, anchors map[string]ast.Node) {
	switch v := n.(type) {
	case *ast.MappingNode:
		if v != nil {
			for _, mv := range v.Values {
				l.Collect(mv, anchors)
			}
		}
	case *ast.MappingValueNode:
		if v != nil {
			l.Collect(v.Key, anchors)
			l.Collect(v.Value, anchors)
		}
	case *ast.MappingKeyNode:
		if v != nil {
			l.Collect(v.Value, anchors)
		}
	case *ast.SequenceNode:
		if v != nil {
			for _, e := range v.Values {
				l.Collect(e, anchors)
			}
		}
	case *ast.TagNode:
		if v != nil {
			l.Collect(v.Value, anchors)
		}
	case *ast.AnchorNode:
		if v != nil {
			l.Collect(v.Value, anchors)
			if v.Name != nil && v.Value != nil {
				anchors[NodeText(v.Name)] = v.Value
			}
		}
	case *ast.AliasNode:
		if v != nil && v.Value != nil {
			if target, ok := anchors[NodeText(v.Value)]; ok {
				l.aliases[v] = target
			}
		}
	}
}

func NotWord(r rune) bool {
	return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

// Mapping returns the entries of a mapping, reporting keys that are not
// scalars and keys given twice (what names a key: "field" or "child"). Merge keys (<<: *anchor, or a list of
// aliases) add the entries of the mappings they name that the mapping does
// not set itself, earlier ones first.
func (l *Loader) Mapping(m *ast.MappingNode, path, what string) []Entry {
	first := map[string]ast.Node{}
	var out []Entry
	var merges []ast.Node
	for _, mv := range m.Values {
		if mv == nil {
			continue
		}
		if isMergeKey(mv.Key) {
			merges = append(merges, mv.Value)
			continue
		}
		name, ok := l.KeyName(mv.Key, path)
		if !ok {
			continue
		}
		if f, dup := first[name]; dup {
			l.Errorf(mv.Key, Sub(path, name), "duplicate %s %q (first at line %d)", what, name, l.Pos(f).Line)
			continue
		}
		first[name] = mv.Key
		out = append(out, Entry{Name: name, Key: mv.Key, Value: mv.Value})
	}
	for _, mn := range merges {
		v, ok := l.Deref(mn, path)
		if !ok {
			continue
		}
		srcs := []ast.Node{v}
		if s, isSeq := v.(*ast.SequenceNode); isSeq && s != nil {
			srcs = s.Values
		}
		for _, src := range srcs {
			if l.Over(src) {
				return out
			}
			sv, ok := l.Deref(src, path)
			if !ok {
				continue
			}
			sm, isMap := sv.(*ast.MappingNode)
			if !isMap || sm == nil {
				l.Errorf(sv, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", Describe(sv))
				continue
			}
			for _, e := range l.Mapping(sm, path, what) {
				if _, set := first[e.Name]; !set {
					first[e.Name] = e.Key
					out = append(out, e)
				}
			}
		}
	}
	return out
}

func isMergeKey(k ast.Node) bool {
	if mk, ok := k.(*ast.MappingKeyNode); ok && mk != nil {
		k = mk.Value
	}
	_, ok := k.(*ast.MergeKeyNode)
	return ok
}

// KeyName returns the text of a mapping key.
func (l *Loader) KeyName(k ast.Node, path string) (string, bool) {
	if mk, ok := k.(*ast.MappingKeyNode); ok && mk != nil {
		k = mk.Value
	}
	v, ok := l.Deref(k, path)
	if !ok {
		return "", false
	}
	if s, ok := StringValue(v); ok {
		return s, true
	}
	switch v.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return NodeText(v), true
	}
	l.Errorf(v, path, "want a name as key, got %s", Describe(v))
	return "", false
}

// Deref follows anchors and aliases to the node they stand for. It reports
// unknown aliases and tags, which are not supported, under path.
func (l *Loader) Deref(n ast.Node, path string) (ast.Node, bool) {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if v == nil {
				return nil, true
			}
			n = v.Value
		case *ast.AliasNode:
			if v == nil {
				return nil, true
			}
			t, ok := l.aliases[v]
			if !ok {
				l.Errorf(v, path, "unknown alias *%s", NodeText(v.Value))
				return nil, false
			}
			n = t
		case *ast.TagNode:
			if v == nil {
				return nil, true
			}
			l.Errorf(v, path, "YAML tags (%s) are not supported", NodeText(v))
			return nil, false
		default:
			return n, true
		}
	}
}

// Peek is deref without reports.
func (l *Loader) Peek(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if v == nil {
				return nil
			}
			n = v.Value
		case *ast.AliasNode:
			if v == nil {
				return nil
			}
			n = l.aliases[v]
		default:
			return n
		}
	}
}

func (l *Loader) maxWork() int {
	if l.MaxWork > 0 {
		return l.MaxWork
	}
	return maxWork
}

// Over reports whether the file is too big to compile, reporting it once.
func (l *Loader) Over(at ast.Node) bool {
	l.Work++
	if l.Work <= l.maxWork() {
		return false
	}
	if !l.TooBig {
		l.TooBig = true
		l.Errorf(at, "", "file too large: more than %d nodes and values, counting each use of an alias", l.maxWork())
	}
	return true
}

func (l *Loader) Errorf(n ast.Node, field, format string, args ...any) {
	l.Add(l.Pos(n), nil, field, fmt.Sprintf(format, args...), nil)
}

// Add records a problem at pos, or at tk when it has a position.
func (l *Loader) Add(pos Position, tk *token.Token, field, msg string, err error) {
	if tk != nil && tk.Position.Line >= 1 {
		pos.Line, pos.Column = tk.Position.Line, max(tk.Position.Column, 1)
	}
	k := errKey{pos, msg}
	if l.seen[k] {
		return
	}
	l.seen[k] = true
	l.Errs = append(l.Errs, &Error{Pos: pos, Field: field, Msg: msg, Err: err})
}

// Pos returns where a node starts, or the file's start when unknown.
func (l *Loader) Pos(n ast.Node) Position {
	p := Position{Filename: l.Name, Line: 1, Column: 1}
	if tk := tokenOf(n); tk != nil && tk.Position.Line >= 1 {
		p.Line, p.Column = tk.Position.Line, max(tk.Position.Column, 1)
	}
	return p
}

// tokenOf returns the first token of a node: the first key of a block
// Mapping (whose own token is the first ':'), else the node's token.
func tokenOf(n ast.Node) (tk *token.Token) {
	defer func() {
		if recover() != nil { // a nil node inside an interface
			tk = nil
		}
	}()
	switch v := n.(type) {
	case nil:
		return nil
	case *ast.DocumentNode:
		if v.Body != nil {
			return tokenOf(v.Body)
		}
		return v.Start
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 && v.Values[0] != nil {
			if tk := tokenOf(v.Values[0].Key); tk != nil {
				return tk
			}
		}
	case *ast.MappingValueNode:
		if tk := tokenOf(v.Key); tk != nil {
			return tk
		}
	case *ast.MappingKeyNode:
		return v.Start
	}
	return n.GetToken()
}

// Bounds on a field path in messages: each node's path is built from its
// parent's, so that a long name or deep nesting would cost every node
// below it its length again. The position says where the field is.
const (
	maxPathName = 64  // bytes of a name in a path
	maxPath     = 256 // bytes of a path: its end is kept
)

// Sub returns the path of a field or child of path, of at most maxPath
// bytes: a longer one keeps its end, after "...".
func Sub(path, name string) string {
	if len(name) > maxPathName {
		name = strings.ToValidUTF8(name[:maxPathName-3], "") + "..."
	}
	if !plain(name) {
		name = strconv.Quote(name)
	}
	if path == "" {
		return name
	}
	s := path + "." + name
	if len(s) > maxPath {
		cut := len(s) - maxPath + 3
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "..." + s[cut:]
	}
	return s
}

// plain reports whether a name needs no quotes in a field path.
func plain(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '*' || r == '-' || !NotWord(r)) {
			return false
		}
	}
	return true
}

// IsNull reports whether n is missing or null.
func IsNull(n ast.Node) bool {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return true
	case *ast.MappingNode:
		return v == nil
	case *ast.SequenceNode:
		return v == nil
	}
	return false
}

// StringValue returns the value of a string scalar.
func StringValue(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		if v != nil {
			return v.Value, true
		}
	case *ast.LiteralNode:
		if v != nil && v.Value != nil {
			return v.Value.Value, true
		}
	}
	return "", false
}

// IntValue returns the value of an integer scalar that fits in an int64.
func IntValue(n *ast.IntegerNode) (int64, bool) {
	switch x := n.Value.(type) {
	case int64:
		return x, true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	case int:
		return int64(x), true
	}
	return 0, false
}

// NodeText returns a node's source text, for messages.
func NodeText(n ast.Node) (s string) {
	defer func() {
		if recover() != nil {
			s = "?"
		}
	}()
	if tk := tokenOf(n); tk != nil {
		return tk.Value
	}
	return "?"
}

// Describe names a node's kind for messages: "integer 60", "mapping".
func Describe(n ast.Node) string {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.IntegerNode:
		return "integer " + NodeText(v)
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "number " + NodeText(v)
	case *ast.BoolNode:
		return "boolean " + NodeText(v)
	case *ast.StringNode, *ast.LiteralNode:
		s, _ := StringValue(v)
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return strconv.Quote(s)
	}
	return n.Type().String()
}
