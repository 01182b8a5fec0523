package policy

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/sluicehq/sluice/algo"
)

// maxWork bounds the nodes and values compiled from one file, counting each
// use of an alias anew, so that a small file cannot expand without end.
const maxWork = 100_000

// loader compiles one file, collecting every problem it finds.
type loader struct {
	name    string
	errs    ErrorList
	seen    map[errKey]bool             // problems reported, to report each once
	aliases map[*ast.AliasNode]ast.Node // what each alias stands for
	work    int                         // nodes and values compiled
	nodes   []Node                      // for Policy.Nodes
	tooBig  bool
	// nullIsZero leaves a field whose value is null at its zero value
	// (Decode), as YAML libraries do; a limits.yaml reports it.
	nullIsZero bool
}

type errKey struct {
	pos Position
	msg string
}

// entry is one key and value of a mapping.
type entry struct {
	name  string
	key   ast.Node
	value ast.Node
}

func parse(name string, data []byte) (*Policy, ErrorList) {
	l := &loader{name: name, seen: map[errKey]bool{}, aliases: map[*ast.AliasNode]ast.Node{}}
	body, ok := l.document(data)
	if !ok {
		return nil, l.errs
	}
	pol := &Policy{name: name, root: &node{}}
	l.file(body, pol)
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	pol.nodes = l.nodes
	return pol, nil
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
		return fmt.Errorf("policy: Decode wants a non-nil pointer, got %T", v)
	}
	l := &loader{name: name, seen: map[errKey]bool{}, aliases: map[*ast.AliasNode]ast.Node{}, nullIsZero: true}
	body, ok := l.document(data)
	if !ok {
		return l.errs
	}
	if body != nil && len(l.errs) == 0 {
		if _, null := body.(*ast.NullNode); !null {
			l.decode(body, rv.Elem(), "")
		}
	}
	if len(l.errs) > 0 {
		l.errs.sort()
		return l.errs
	}
	return nil
}

// document parses data and returns the body of its one document (nil for
// none), having collected its anchors; a second document is an error.
// ok is false when data is not YAML.
func (l *loader) document(data []byte) (body ast.Node, ok bool) {
	f, err := parseYAML(data)
	if err != nil {
		l.syntax(err)
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
			l.errorf(doc, "", "more than one YAML document (only one is allowed)")
		}
		l.collect(doc.Body, anchors)
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
	return parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
}

// syntax reports a YAML parser error.
func (l *loader) syntax(err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		l.add(Position{l.name, 1, 1}, ye.GetToken(), "", "YAML syntax: "+ye.GetMessage(), err)
		return
	}
	l.add(Position{l.name, 1, 1}, nil, "", err.Error(), err)
}

// collect records, in the order of the file, what each alias stands for:
// the last anchor of its name before it. An anchor is recorded after its
// own value, so that no alias can refer to a node that contains it.
func (l *loader) collect(n ast.Node, anchors map[string]ast.Node) {
	switch v := n.(type) {
	case *ast.MappingNode:
		if v != nil {
			for _, mv := range v.Values {
				l.collect(mv, anchors)
			}
		}
	case *ast.MappingValueNode:
		if v != nil {
			l.collect(v.Key, anchors)
			l.collect(v.Value, anchors)
		}
	case *ast.MappingKeyNode:
		if v != nil {
			l.collect(v.Value, anchors)
		}
	case *ast.SequenceNode:
		if v != nil {
			for _, e := range v.Values {
				l.collect(e, anchors)
			}
		}
	case *ast.TagNode:
		if v != nil {
			l.collect(v.Value, anchors)
		}
	case *ast.AnchorNode:
		if v != nil {
			l.collect(v.Value, anchors)
			if v.Name != nil && v.Value != nil {
				anchors[nodeText(v.Name)] = v.Value
			}
		}
	case *ast.AliasNode:
		if v != nil && v.Value != nil {
			if target, ok := anchors[nodeText(v.Value)]; ok {
				l.aliases[v] = target
			}
		}
	}
}

// file compiles the top level: schema and settings.
func (l *loader) file(body ast.Node, pol *Policy) {
	v, ok := l.deref(body, "")
	if !ok {
		return
	}
	m, isMap := v.(*ast.MappingNode)
	if isNull(v) {
		l.add(Position{l.name, 1, 1}, nil, "schema", "empty tree: the file has no schema", nil)
		return
	}
	if !isMap {
		l.errorf(v, "", "want a mapping with schema (and unmatched), got %s", describe(v))
		return
	}
	var schema *entry
	for _, e := range l.mapping(m, "", "field") {
		switch e.name {
		case "schema":
			schema = &e
		case "definitions":
			// anything, for anchors
		case "unmatched":
			s, ok := l.str(e.value, "unmatched")
			switch {
			case !ok:
			case s == "deny":
				pol.denyUnmatched = true
			case s != "allow":
				l.errorf(e.value, "unmatched", "want allow or deny, got %q", s)
			}
		default:
			l.errorf(e.key, e.name, "unknown field %q (want schema, unmatched or definitions)", e.name)
		}
	}
	if schema == nil {
		l.errorf(m, "schema", "empty tree: the file has no schema")
		return
	}
	pol.root.children, pol.root.star, pol.root.globs = l.children(schema.value, schema.key, "schema", "", false)
}

// children compiles a mapping of child nodes.
func (l *loader) children(n, key ast.Node, path, pattern string, shadow bool) (map[string]*node, *node, []*node) {
	v, ok := l.deref(n, path)
	if !ok {
		return nil, nil, nil
	}
	empty := "children is empty"
	if path == "schema" {
		empty = "empty tree: schema has no nodes"
	}
	m, isMap := v.(*ast.MappingNode)
	switch {
	case isNull(v):
		l.errorf(key, path, "%s", empty)
		return nil, nil, nil
	case !isMap:
		l.errorf(v, path, "want a mapping of child names to nodes, got %s", describe(v))
		return nil, nil, nil
	}
	entries := l.mapping(m, path, "child")
	if len(entries) == 0 && len(m.Values) == 0 {
		l.errorf(m, path, "%s", empty)
	}
	named := map[string]*node{}
	var star *node
	var globs []*node
	for _, e := range entries {
		if e.name == "" {
			// Its pattern would be "" at the top: no pattern at all.
			l.errorf(e.key, path, "a child's name may not be empty")
			continue
		}
		p := e.name
		if pattern != "" {
			p = pattern + "/" + e.name
		}
		isGlob := e.name != Wildcard && strings.Contains(e.name, Wildcard)
		c := l.node(e.value, e.key, sub(path, e.name), p, shadow, isGlob)
		switch {
		case c == nil:
		case e.name == Wildcard:
			star = c
		case isGlob:
			c.glob = e.name
			globs = append(globs, c)
		default:
			named[e.name] = c
		}
	}
	return named, star, globs
}

// node compiles one node.
func (l *loader) node(n, key ast.Node, path, pattern string, shadow, glob bool) *node {
	if l.over(key) {
		return nil
	}
	v, ok := l.deref(n, path)
	if !ok {
		return nil
	}
	m, isMap := v.(*ast.MappingNode)
	switch {
	case isNull(v):
		l.errorf(key, path, "empty node: give it limits, children or unlimited: true")
		return nil
	case !isMap:
		l.errorf(v, path, "want a mapping of limits, children, unlimited and shadow, got %s", describe(v))
		return nil
	}
	nd := &node{pattern: pattern, shadow: shadow}
	var limits, children, unlimited, shadowed, counter, leased *entry
	var listed, delayed *entry
	uok, unknown := false, false
	for _, e := range l.mapping(m, path, "field") {
		switch e.name {
		case "limits":
			limits = &e
		case "children":
			children = &e
		case "unlimited":
			unlimited = &e
			nd.unlimited, uok = l.boolean(e.value, sub(path, e.name))
		case "shadow":
			shadowed = &e
			own, _ := l.boolean(e.value, sub(path, e.name))
			if !own {
				shadowed = nil
			}
			nd.shadow = nd.shadow || own
			nd.ownShadow = own
		case "name":
			nd.name, _ = l.str(e.value, sub(path, e.name))
		case "replaces":
			nd.replaces = l.strs(e.value, sub(path, e.name))
		case "shared_counter":
			counter = &e
			nd.sharedCounter, _ = l.boolean(e.value, sub(path, e.name))
		case "lease":
			leased = &e
			nd.lease, _ = l.boolean(e.value, sub(path, e.name))
		case "delay":
			delayed = &e
			var dc struct {
				Max time.Duration `yaml:"max"`
			}
			if l.decode(e.value, reflect.ValueOf(&dc).Elem(), sub(path, e.name)) {
				nd.delay = dc.Max
			}
		case "allow":
			listed = &e
			nd.allow = l.keyList(e.value, sub(path, e.name))
		case "deny":
			listed = &e
			nd.deny = l.keyList(e.value, sub(path, e.name))
		default:
			l.errorf(e.key, sub(path, e.name), "unknown field %q (want limits, children, unlimited, shadow, name, replaces, shared_counter, lease, delay, allow or deny)", e.name)
			unknown = true
		}
	}
	idx := len(l.nodes)
	l.nodes = append(l.nodes, Node{})
	if limits != nil {
		cs := l.limits(limits.value, limits.key, sub(path, "limits"))
		nd.limits = make([]algo.Limit, len(cs))
		nd.specs = make([]algo.Spec, len(cs))
		nd.plans = make([]algo.Plan, len(cs))
		for i, c := range cs {
			nd.limits[i], nd.specs[i], nd.plans[i] = c.limit, c.spec, c.plan
		}
	}
	if children != nil {
		nd.children, nd.star, nd.globs = l.children(children.value, children.key, sub(path, "children"), pattern, nd.shadow)
	}
	switch {
	case nd.unlimited && limits != nil:
		l.errorf(unlimited.key, sub(path, "unlimited"), "an unlimited node cannot have limits")
	case nd.unlimited && children != nil:
		l.errorf(unlimited.key, sub(path, "unlimited"), "an unlimited node cannot have children (nothing below it is limited)")
	case nd.unlimited && shadowed != nil:
		l.errorf(shadowed.key, sub(path, "shadow"), "an unlimited node cannot be shadow")
	case counter != nil && !glob:
		l.errorf(counter.key, sub(path, "shared_counter"), "shared_counter is for a child whose name is a pattern with \"*\" (such as \"files/*\"), whose matches may share one counter")
	case listed != nil && !glob && pattern != Wildcard && !strings.HasSuffix(pattern, "/"+Wildcard):
		l.errorf(listed.key, sub(path, listed.name), "allow and deny lists are for a \"*\" or pattern child: the segment that reaches %s is always its name", pattern)
	case limits == nil && children == nil && listed == nil && !unknown && (unlimited == nil || uok && !nd.unlimited):
		l.errorf(key, path, "empty node: give it limits, children or unlimited: true")
	case nd.lease && limits == nil:
		l.errorf(leased.key, sub(path, "lease"), "lease needs the node's own limits")
	case nd.lease:
		for i, lim := range nd.limits {
			if !lim.Kind().Leasable() {
				l.errorf(leased.key, sub(path, "lease"), "limit %d is %s: %v", i, lim.Kind(), algo.ErrNotLeasable)
				break
			}
			if _, ok := lim.(algo.Blocking); ok {
				l.errorf(leased.key, sub(path, "lease"), "limit %d has a block: a lease admits from units taken ahead, which a block that starts meanwhile could not stop", i)
				break
			}
		}
	}
	if delayed != nil {
		l.delayNode(nd, delayed, limits != nil, sub(path, "delay"))
	}
	l.nodes[idx] = Node{Pattern: pattern, Specs: nd.specs, Shadow: nd.shadow, Unlimited: nd.unlimited, Lease: nd.lease, Delay: nd.delay}
	return nd
}

// delayNode checks a node's delay and makes its plans the reserving ones
// (algo.Reserving): a decision then admits a cost that its limits
// would admit within the delay, reserved, and the caller waits.
func (l *loader) delayNode(nd *node, e *entry, hasLimits bool, path string) {
	switch {
	case nd.delay <= 0 || nd.delay > MaxDelay:
		l.errorf(e.value, sub(path, "max"), "want a delay above 0 and at most %v, got %v", MaxDelay, nd.delay)
		nd.delay = 0
		return
	case !hasLimits:
		l.errorf(e.key, path, "delay needs the node's own limits")
		nd.delay = 0
		return
	}
	for i := range nd.plans {
		r, err := algo.Reserving(&nd.plans[i], nd.delay)
		if err != nil {
			l.errorf(e.key, path, "limit %d is %s: delay is for %s, which refill steadily and can reserve ahead", i, nd.plans[i].Kind(), delayableKinds())
			nd.delay = 0
			return
		}
		nd.plans[i] = r
	}
}

// delayableKinds names the kinds a delay can take: those whose plans
// reserve ahead (algo.Reserving, the one place that says so).
func delayableKinds() string {
	var names []string
	for _, k := range algo.Kinds() {
		p, err := algo.Compile(k.Example())
		if err != nil {
			continue
		}
		if _, err := algo.Reserving(&p, 0); err == nil {
			names = append(names, k.String())
		}
	}
	return strings.Join(names, " and ")
}

// limits compiles a node's limits: a list of limits, each a mapping of
// algo.Spec fields or a [burst, count, period] shorthand; a single
// shorthand; or a single mapping.
func (l *loader) limits(n, key ast.Node, path string) []compiled {
	v, ok := l.deref(n, path)
	if !ok {
		return nil
	}
	var out []compiled
	add := func(c compiled, ok bool) {
		if ok {
			out = append(out, c)
		}
	}
	switch v := v.(type) {
	case *ast.MappingNode:
		add(l.spec(v, path))
	case *ast.SequenceNode:
		if len(v.Values) == 0 {
			l.errorf(v, path, "limits is empty")
			return nil
		}
		if l.scalars(v) {
			add(l.shorthand(v, path))
			return out
		}
		for i, e := range v.Values {
			p := fmt.Sprintf("%s[%d]", path, i)
			ev, ok := l.deref(e, p)
			if !ok {
				continue
			}
			switch ev := ev.(type) {
			case *ast.MappingNode:
				add(l.spec(ev, p))
			case *ast.SequenceNode:
				add(l.shorthand(ev, p))
			default:
				l.errorf(ev, p, "want a limit mapping or a [burst, count, period] list, got %s", describe(ev))
			}
		}
	default:
		if isNull(v) {
			l.errorf(key, path, "limits is empty")
		} else {
			l.errorf(v, path, "want a list of limits, a limit mapping or [burst, count, period], got %s", describe(v))
		}
	}
	return out
}

// scalars reports whether every entry of the sequence is a scalar.
func (l *loader) scalars(s *ast.SequenceNode) bool {
	for _, e := range s.Values {
		v := l.peek(e)
		switch v.(type) {
		case *ast.MappingNode, *ast.SequenceNode:
			return false
		}
	}
	return true
}

// shorthand compiles [burst, count, period]: a GCRA limit with CL.THROTTLE's
// arguments, the period in seconds or a duration string.
func (l *loader) shorthand(s *ast.SequenceNode, path string) (compiled, bool) {
	if len(s.Values) != 3 {
		l.errorf(s, path, "a [burst, count, period] shorthand has 3 values, got %d", len(s.Values))
		return compiled{}, false
	}
	spec := algo.Spec{Algorithm: algo.KindGCRA.String()}
	ok := l.decode(s.Values[0], reflect.ValueOf(&spec.Burst).Elem(), path+".burst")
	ok = l.decode(s.Values[1], reflect.ValueOf(&spec.Count).Elem(), path+".count") && ok
	period, pok := l.deref(s.Values[2], path+".period")
	if pok {
		if i, isInt := period.(*ast.IntegerNode); isInt {
			secs, iok := intValue(i)
			if !iok || secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
				l.errorf(period, path+".period", "%s seconds is out of range", nodeText(period))
				pok = false
			} else {
				spec.Period = time.Duration(secs) * time.Second
			}
		} else if s, isStr := period.(*ast.StringNode); isStr && s.Token != nil && s.Token.Type == token.StringType && number.MatchString(s.Value) {
			l.errorf(period, path+".period", "%s seconds is out of range", s.Value)
			pok = false
		} else if _, isStr := stringValue(period); isStr {
			pok = l.decode(period, reflect.ValueOf(&spec.Period).Elem(), path+".period")
		} else {
			l.errorf(period, path+".period", "want seconds or a duration such as \"60s\", got %s", describe(period))
			pok = false
		}
	}
	if !ok || !pok {
		return compiled{}, false
	}
	fields := map[string]ast.Node{"burst": l.peek(s.Values[0]), "count": l.peek(s.Values[1]), "period": period}
	return l.build(spec, fields, s, path)
}

// spec compiles a mapping of algo.Spec fields.
//
// A GCRA or token bucket may give its rate plainly, as rate: N/duration
// ({algorithm: gcra, burst: 15, rate: 30/1m} is burst 15, count 30, period
// 1m; for token_bucket it is rate 30, per 1m).
func (l *loader) spec(m *ast.MappingNode, path string) (compiled, bool) {
	var spec algo.Spec
	m, plain, at := l.plainRate(m)
	fields, ok := l.decodeStruct(m, reflect.ValueOf(&spec).Elem(), path)
	if !ok {
		return compiled{}, false
	}
	if at != nil {
		n, per, err := algo.ParseRate(plain)
		switch {
		case err != nil:
			l.errorf(at, sub(path, "rate"), "%v", strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "))
			return compiled{}, false
		case spec.Algorithm == algo.KindGCRA.String() && spec.Count == 0 && spec.Period == 0:
			spec.Count, spec.Period = n, per
		case spec.Algorithm == algo.KindTokenBucket.String() && spec.Per == 0:
			spec.Rate, spec.Per = n, per
		default:
			l.errorf(at, sub(path, "rate"), "rate: N/duration is for gcra (without count and period) and token_bucket (without per)")
			return compiled{}, false
		}
		fields["rate"] = at
	}
	return l.build(spec, fields, m, path)
}

// plainRate takes a rate written as "N/duration" out of a limit mapping:
// it returns the mapping without it, the text and where it is (nil when
// there is none).
func (l *loader) plainRate(m *ast.MappingNode) (*ast.MappingNode, string, ast.Node) {
	for i, kv := range m.Values {
		k, ok := stringValue(kv.Key)
		if !ok || k != "rate" {
			continue
		}
		v, ok := stringValue(kv.Value)
		if !ok || !strings.Contains(v, "/") {
			return m, "", nil
		}
		c := *m
		c.Values = append(append([]*ast.MappingValueNode(nil), m.Values[:i]...), m.Values[i+1:]...)
		return &c, v, kv.Value
	}
	return m, "", nil
}

// build builds a spec. Its error is reported at the first field that it
// names, of those the file sets, or else at the limit.
func (l *loader) build(spec algo.Spec, fields map[string]ast.Node, at ast.Node, path string) (compiled, bool) {
	lim, err := spec.Build()
	var plan algo.Plan
	if err == nil {
		plan, err = algo.Compile(lim) // once, for every decision
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": ")
		pos, field := at, path
		words := strings.FieldsFunc(msg, notWord)
		for i, w := range words {
			if n, ok := fields[w]; ok {
				pos, field = n, path+"."+w
				if w == "block" && i+1 < len(words) {
					field += "." + words[i+1] // "block for must be ...": block.for
				}
				break
			}
		}
		l.add(l.pos(pos), nil, field, msg, err)
		return compiled{}, false
	}
	return compiled{spec: spec, limit: lim, plan: plan}, true
}

func notWord(r rune) bool {
	return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

// mapping returns the entries of a mapping, reporting keys that are not
// scalars and keys given twice (what names a key: "field" or "child"). Merge keys (<<: *anchor, or a list of
// aliases) add the entries of the mappings they name that the mapping does
// not set itself, earlier ones first.
func (l *loader) mapping(m *ast.MappingNode, path, what string) []entry {
	first := map[string]ast.Node{}
	var out []entry
	var merges []ast.Node
	for _, mv := range m.Values {
		if mv == nil {
			continue
		}
		if isMergeKey(mv.Key) {
			merges = append(merges, mv.Value)
			continue
		}
		name, ok := l.keyName(mv.Key, path)
		if !ok {
			continue
		}
		if f, dup := first[name]; dup {
			l.errorf(mv.Key, sub(path, name), "duplicate %s %q (first at line %d)", what, name, l.pos(f).Line)
			continue
		}
		first[name] = mv.Key
		out = append(out, entry{name: name, key: mv.Key, value: mv.Value})
	}
	for _, mn := range merges {
		v, ok := l.deref(mn, path)
		if !ok {
			continue
		}
		srcs := []ast.Node{v}
		if s, isSeq := v.(*ast.SequenceNode); isSeq && s != nil {
			srcs = s.Values
		}
		for _, src := range srcs {
			if l.over(src) {
				return out
			}
			sv, ok := l.deref(src, path)
			if !ok {
				continue
			}
			sm, isMap := sv.(*ast.MappingNode)
			if !isMap || sm == nil {
				l.errorf(sv, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(sv))
				continue
			}
			for _, e := range l.mapping(sm, path, what) {
				if _, set := first[e.name]; !set {
					first[e.name] = e.key
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

// keyName returns the text of a mapping key.
func (l *loader) keyName(k ast.Node, path string) (string, bool) {
	if mk, ok := k.(*ast.MappingKeyNode); ok && mk != nil {
		k = mk.Value
	}
	v, ok := l.deref(k, path)
	if !ok {
		return "", false
	}
	if s, ok := stringValue(v); ok {
		return s, true
	}
	switch v.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return nodeText(v), true
	}
	l.errorf(v, path, "want a name as key, got %s", describe(v))
	return "", false
}

// deref follows anchors and aliases to the node they stand for. It reports
// unknown aliases and tags, which are not supported, under path.
func (l *loader) deref(n ast.Node, path string) (ast.Node, bool) {
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
				l.errorf(v, path, "unknown alias *%s", nodeText(v.Value))
				return nil, false
			}
			n = t
		case *ast.TagNode:
			if v == nil {
				return nil, true
			}
			l.errorf(v, path, "YAML tags (%s) are not supported", nodeText(v))
			return nil, false
		default:
			return n, true
		}
	}
}

// peek is deref without reports.
func (l *loader) peek(n ast.Node) ast.Node {
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

// over reports whether the file is too big to compile, reporting it once.
func (l *loader) over(at ast.Node) bool {
	l.work++
	if l.work <= maxWork {
		return false
	}
	if !l.tooBig {
		l.tooBig = true
		l.errorf(at, "", "policy too large: more than %d nodes and values, counting each use of an alias", maxWork)
	}
	return true
}

func (l *loader) errorf(n ast.Node, field, format string, args ...any) {
	l.add(l.pos(n), nil, field, fmt.Sprintf(format, args...), nil)
}

// add records a problem at pos, or at tk when it has a position.
func (l *loader) add(pos Position, tk *token.Token, field, msg string, err error) {
	if tk != nil && tk.Position.Line >= 1 {
		pos.Line, pos.Column = tk.Position.Line, max(tk.Position.Column, 1)
	}
	k := errKey{pos, msg}
	if l.seen[k] {
		return
	}
	l.seen[k] = true
	l.errs = append(l.errs, &Error{Pos: pos, Field: field, Msg: msg, Err: err})
}

// pos returns where a node starts, or the file's start when unknown.
func (l *loader) pos(n ast.Node) Position {
	p := Position{Filename: l.name, Line: 1, Column: 1}
	if tk := tokenOf(n); tk != nil && tk.Position.Line >= 1 {
		p.Line, p.Column = tk.Position.Line, max(tk.Position.Column, 1)
	}
	return p
}

// tokenOf returns the first token of a node: the first key of a block
// mapping (whose own token is the first ':'), else the node's token.
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

// sub returns the path of a field or child of path.
func sub(path, name string) string {
	if !plain(name) {
		name = strconv.Quote(name)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

// plain reports whether a name needs no quotes in a field path.
func plain(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '*' || r == '-' || !notWord(r)) {
			return false
		}
	}
	return true
}

// isNull reports whether n is missing or null.
func isNull(n ast.Node) bool {
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

// stringValue returns the value of a string scalar.
func stringValue(n ast.Node) (string, bool) {
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

// intValue returns the value of an integer scalar that fits in an int64.
func intValue(n *ast.IntegerNode) (int64, bool) {
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

// nodeText returns a node's source text, for messages.
func nodeText(n ast.Node) (s string) {
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

// describe names a node's kind for messages: "integer 60", "mapping".
func describe(n ast.Node) string {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.IntegerNode:
		return "integer " + nodeText(v)
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "number " + nodeText(v)
	case *ast.BoolNode:
		return "boolean " + nodeText(v)
	case *ast.StringNode, *ast.LiteralNode:
		s, _ := stringValue(v)
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return strconv.Quote(s)
	}
	return n.Type().String()
}
