package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/store"
)

// loader compiles one limits file, collecting every problem it finds.
type loader struct {
	*yamlfile.Loader
	nodes  []Node   // for Policy.Nodes
	counts counting // the file's counts
	// owing are the limits with debt counts: each gives the nodes of one
	// fixed window, and their plans without it, compiled once: an Envoy
	// configuration's 100,000 descriptors share a few limits.
	owing map[algo.FixedWindow]owed
	// forms are the levels' forms made so far, one per spec (makeForms).
	forms map[string]*levelForm
}

// owed is a fixed window with debt, compiled, and without it.
type owed struct {
	limit  algo.Limit
	spec   algo.Spec
	plan   plan
	noDebt []algo.Plan
}

func parse(name string, data []byte) (*Policy, yamlfile.ErrorList) {
	l := &loader{Loader: yamlfile.New(name), forms: map[string]*levelForm{}}
	body, ok := l.Parse(data)
	if !ok {
		return nil, l.Errs
	}
	return l.compile(name, body)
}

// compile compiles the body of a limits.yaml.
func (l *loader) compile(name string, body ast.Node) (*Policy, yamlfile.ErrorList) {
	l.Trim = algo.ErrInvalid.Error() + ": "
	pol := &Policy{name: name, root: &node{}}
	l.file(body, pol)
	if len(l.Errs) > 0 {
		return nil, l.Errs
	}
	pol.nodes, pol.counts = l.nodes, l.counts
	return pol, nil
}

// file compiles the top level: schema and settings.
func (l *loader) file(body ast.Node, pol *Policy) {
	v, ok := l.Deref(body, "")
	if !ok {
		return
	}
	m, isMap := v.(*ast.MappingNode)
	if yamlfile.IsNull(v) {
		l.Add(yamlfile.Position{Filename: l.Name, Line: 1, Column: 1}, nil, "schema", "empty tree: the file has no schema", nil)
		return
	}
	if !isMap {
		l.Errorf(v, "", "want a mapping with schema (and unmatched), got %s", yamlfile.Describe(v))
		return
	}
	var schema *yamlfile.Entry
	for _, e := range l.Mapping(m, "", "field") {
		switch e.Name {
		case "schema":
			schema = &e
		case "definitions":
			// anything, for anchors
		case "unmatched":
			s, ok := l.Str(e.Value, "unmatched")
			switch {
			case !ok:
			case s == "deny":
				pol.denyUnmatched = true
			case s != "allow":
				l.Errorf(e.Value, "unmatched", "want allow or deny, got %q", s)
			}
		case "counts":
			s, ok := l.Str(e.Value, "counts")
			if c := slices.Index(countings[:], s); ok && c >= 0 {
				l.counts = counting(c)
			} else if ok {
				l.Errorf(e.Value, "counts", "want all_or_nothing, each or stop_when_over, got %q", s)
			}
		default:
			l.Errorf(e.Key, e.Name, "unknown field %q (want schema, unmatched, counts or definitions)", e.Name)
		}
	}
	if schema == nil {
		l.Errorf(m, "schema", "empty tree: the file has no schema")
		return
	}
	pol.root.children, pol.root.star, pol.root.globs = l.children(schema.Value, schema.Key, "schema", "", false)
}

// children compiles a mapping of child nodes.
func (l *loader) children(n, key ast.Node, path, pattern string, shadow bool) (map[string]*node, *node, []*node) {
	v, ok := l.Deref(n, path)
	if !ok {
		return nil, nil, nil
	}
	empty := "children is empty"
	if path == "schema" {
		empty = "empty tree: schema has no nodes"
	}
	m, isMap := v.(*ast.MappingNode)
	switch {
	case yamlfile.IsNull(v):
		l.Errorf(key, path, "%s", empty)
		return nil, nil, nil
	case !isMap:
		l.Errorf(v, path, "want a mapping of child names to nodes, got %s", yamlfile.Describe(v))
		return nil, nil, nil
	}
	entries := l.Mapping(m, path, "child")
	if len(entries) == 0 && len(m.Values) == 0 {
		l.Errorf(m, path, "%s", empty)
	}
	named := map[string]*node{}
	var star *node
	var globs []*node
	l.duplicates(m, entries, path, pattern, shadow)
	for _, e := range entries {
		if e.Name == "" {
			// Its pattern would be "" at the top: no pattern at all.
			l.Errorf(e.Key, path, "a child's name may not be empty")
			continue
		}
		p := e.Name
		if pattern != "" {
			p = pattern + "/" + e.Name
		}
		if len(p)-strings.Count(p, wildcard) > store.MaxKeyLen || len(p) > 2*store.MaxKeyLen {
			// Never reached, and what is below it would cost each
			// node its whole pattern again.
			l.Errorf(e.Key, path, "child %s is never matched: its pattern is longer than a key may be (%d bytes, not counting its \"*\"s; %d with them)", describeName(e.Name), store.MaxKeyLen, 2*store.MaxKeyLen)
			continue
		}
		isGlob := e.Name != wildcard && strings.Contains(e.Name, wildcard)
		c := l.node(e.Value, e.Key, yamlfile.Sub(path, e.Name), p, shadow, isGlob)
		switch {
		case c == nil:
		case e.Name == wildcard:
			star = c
		case isGlob:
			c.glob = e.Name
			globs = append(globs, c)
		default:
			named[e.Name] = c
		}
	}
	return named, star, globs
}

// describeName quotes a child's name for a message, cut to 40 bytes.
func describeName(name string) string {
	if len(name) > 40 {
		return strconv.Quote(strings.ToValidUTF8(name[:37], "")) + "..."
	}
	return strconv.Quote(name)
}

// duplicates compiles, to report their own errors and then drop them, the
// children of m given twice (Mapping reports each as a duplicate and
// keeps the first, entries).
func (l *loader) duplicates(m *ast.MappingNode, entries []yamlfile.Entry, path, pattern string, shadow bool) {
	kept := make(map[string]ast.Node, len(entries))
	for _, e := range entries {
		kept[e.Name] = e.Key
	}
	for _, mv := range m.Values {
		if mv == nil {
			continue
		}
		name, ok := yamlfile.StringValue(mv.Key)
		if first, seen := kept[name]; !ok || name == "" || !seen || first == ast.Node(mv.Key) {
			continue
		}
		p := name
		if pattern != "" {
			p = pattern + "/" + name
		}
		l.node(mv.Value, mv.Key, yamlfile.Sub(path, name), p, shadow, name != wildcard && strings.Contains(name, wildcard))
	}
}

// node compiles one node.
func (l *loader) node(n, key ast.Node, path, pattern string, shadow, glob bool) *node {
	if l.Over(key) {
		return nil
	}
	v, ok := l.Deref(n, path)
	if !ok {
		return nil
	}
	m, isMap := v.(*ast.MappingNode)
	switch {
	case yamlfile.IsNull(v):
		l.Errorf(key, path, "empty node: give it limits, children or unlimited: true")
		return nil
	case !isMap:
		l.Errorf(v, path, "want a mapping of limits, children, unlimited and shadow, got %s", yamlfile.Describe(v))
		return nil
	}
	nd := &node{pattern: pattern, shadow: shadow}
	var limits, children, unlimited, shadowed, counter, leased, global *yamlfile.Entry
	var listed, delayed, owed, escalated *yamlfile.Entry
	uok, unknown := false, false
	for _, e := range l.Mapping(m, path, "field") {
		switch e.Name {
		case "limits":
			limits = &e
		case "children":
			children = &e
		case "unlimited":
			unlimited = &e
			nd.unlimited, uok = l.Bool(e.Value, yamlfile.Sub(path, e.Name))
		case "shadow", "quota_mode":
			shadowed = &e
			own, _ := l.Bool(e.Value, yamlfile.Sub(path, e.Name))
			if !own {
				shadowed = nil
			}
			if e.Name == "quota_mode" {
				nd.quotaMode = own
			}
			nd.shadow = nd.shadow || own
			nd.ownShadow = nd.ownShadow || own
		case "name":
			nd.name, _ = l.Str(e.Value, yamlfile.Sub(path, e.Name))
		case "replaces":
			nd.replaces = l.Strs(e.Value, yamlfile.Sub(path, e.Name))
		case "shared_counter":
			counter = &e
			nd.sharedCounter, _ = l.Bool(e.Value, yamlfile.Sub(path, e.Name))
		case "lease":
			leased = &e
			nd.lease, _ = l.Bool(e.Value, yamlfile.Sub(path, e.Name))
		case "global":
			global = &e
			nd.global, _ = l.Bool(e.Value, yamlfile.Sub(path, e.Name))
		case "delay":
			delayed = &e
			var dc struct {
				Max time.Duration `yaml:"max"`
			}
			if l.Decode(e.Value, reflect.ValueOf(&dc).Elem(), yamlfile.Sub(path, e.Name)) {
				nd.delay = dc.Max
			}
		case "request_limit":
			var rl struct {
				Max    int64         `yaml:"max"`
				Window time.Duration `yaml:"window"`
			}
			if l.Decode(e.Value, reflect.ValueOf(&rl).Elem(), yamlfile.Sub(path, e.Name)) {
				if rl.Max < 1 || rl.Max > algo.MaxCount || rl.Window <= 0 {
					l.Errorf(e.Value, yamlfile.Sub(path, e.Name), "want max 1 to %d per a positive window, such as {max: 1000, window: 1m}", algo.MaxCount)
				} else {
					nd.requestMax = &algo.FixedWindow{Count: rl.Max, Window: rl.Window}
				}
			}
		case "escalate":
			escalated = &e
			nd.escalate = l.escalation(e.Value, yamlfile.Sub(path, e.Name))
		case "debt":
			if debt, _ := l.Bool(e.Value, yamlfile.Sub(path, e.Name)); debt {
				owed = &e
			}
		case "allow":
			listed = &e
			nd.allow = l.keyList(e.Value, yamlfile.Sub(path, e.Name), "allow", pattern)
		case "deny":
			listed = &e
			nd.deny = l.keyList(e.Value, yamlfile.Sub(path, e.Name), "deny", pattern)
		default:
			l.Errorf(e.Key, yamlfile.Sub(path, e.Name), "unknown field %q (want limits, children, unlimited, shadow, quota_mode, name, replaces, shared_counter, lease, global, delay, request_limit, debt, escalate, allow or deny)", e.Name)
			unknown = true
		}
	}
	idx := len(l.nodes)
	nd.index = idx
	l.nodes = append(l.nodes, Node{})
	if limits != nil {
		cs := l.limits(limits.Value, limits.Key, yamlfile.Sub(path, "limits"))
		nd.limits = make([]algo.Limit, len(cs))
		nd.specs = make([]algo.Spec, len(cs))
		nd.plans = make([]plan, len(cs))
		for i, c := range cs {
			nd.limits[i], nd.specs[i], nd.plans[i].Plan = c.limit, c.spec, c.plan
		}
		if owed != nil {
			l.debtNode(nd, owed.Key, yamlfile.Sub(path, "debt"), "")
		} else if l.counts != allOrNothing {
			l.countNode(nd, limits.Key, yamlfile.Sub(path, "limits"))
		}
		nd.counts = l.counts
	}
	if children != nil {
		nd.children, nd.star, nd.globs = l.children(children.Value, children.Key, yamlfile.Sub(path, "children"), pattern, nd.shadow)
	}
	switch {
	case nd.unlimited && limits != nil:
		l.Errorf(unlimited.Key, yamlfile.Sub(path, "unlimited"), "an unlimited node cannot have limits")
	case nd.unlimited && children != nil:
		l.Errorf(unlimited.Key, yamlfile.Sub(path, "unlimited"), "an unlimited node cannot have children (nothing below it is limited)")
	case nd.unlimited && shadowed != nil:
		l.Errorf(shadowed.Key, yamlfile.Sub(path, shadowed.Name), "an unlimited node cannot be %s", shadowed.Name)
	case counter != nil && !glob:
		l.Errorf(counter.Key, yamlfile.Sub(path, "shared_counter"), "shared_counter is for a child whose name is a pattern with \"*\" (such as \"files/*\"), whose matches may share one counter")
	case listed != nil && !glob && pattern != wildcard && !strings.HasSuffix(pattern, "/"+wildcard):
		l.Errorf(listed.Key, yamlfile.Sub(path, listed.Name), "allow and deny lists are for a \"*\" or pattern child: the segment that reaches %s is always its name", pattern)
	case limits == nil && children == nil && listed == nil && !unknown && (unlimited == nil || uok && !nd.unlimited):
		l.Errorf(key, path, "empty node: give it limits, children or unlimited: true")
	case owed != nil && limits == nil:
		l.Errorf(owed.Key, yamlfile.Sub(path, "debt"), "debt needs the node's own limits")
	case nd.lease && limits == nil:
		l.Errorf(leased.Key, yamlfile.Sub(path, "lease"), "lease needs the node's own limits")
	case nd.lease:
		l.windowsOnly(nd, leased, yamlfile.Sub(path, "lease"), "leases", "a lease admits from units taken ahead")
	}
	switch {
	case nd.global && limits == nil:
		l.Errorf(global.Key, yamlfile.Sub(path, "global"), "global needs the node's own limits")
	case nd.global && nd.lease:
		l.Errorf(global.Key, yamlfile.Sub(path, "global"), "global beside lease: true: a global limit is admitted from its region's share, a lease from the regional window alone")
	case nd.global:
		l.windowsOnly(nd, global, yamlfile.Sub(path, "global"), "global limits", "a region admits a global limit from units charged at home ahead")
	}
	if delayed != nil {
		l.delayNode(nd, delayed, limits != nil, yamlfile.Sub(path, "delay"))
	}
	if escalated != nil && nd.escalate != nil {
		l.escalateNode(nd, escalated, yamlfile.Sub(path, "escalate"))
	}
	if nd.noDebt == nil {
		nd.noDebt = withoutDebt(nd.plans)
	}
	nd.listsAddrs = nd.allow.hasAddrs() || nd.deny.hasAddrs()
	makeForms(l.forms, nd.limits, nd.plans)
	l.nodes[idx] = Node{Pattern: pattern, Specs: nd.specs, Shadow: nd.shadow, Unlimited: nd.unlimited, Lease: nd.lease, Global: nd.global, Delay: nd.delay}
	return nd
}

// windowsOnly checks that every limit of a node that says lease: true or
// global: true (at e; what the errors call them) is a fixed window of a
// duration with neither block nor debt: units taken ahead (why) are spent
// until the window ends, which only a window that ends with them keeps
// exact.
func (l *loader) windowsOnly(nd *node, e *yamlfile.Entry, path, what, why string) {
	for i, lim := range nd.limits {
		if !lim.Kind().Leasable() {
			l.Errorf(e.Key, path, "limit %d is %s: only a fixed_window limit can be leased: a lease's units count in the window when taken and are used until it ends, which only a window that ends with the lease keeps exact", i, lim.Kind())
			return
		}
		if _, ok := lim.(algo.Blocking); ok {
			l.Errorf(e.Key, path, "limit %d has a block: %s, which a block that starts meanwhile could not stop", i, why)
			return
		}
		if _, ok := lim.(algo.Debt); ok {
			l.Errorf(e.Key, path, "limit %d has a debt: %s, and a charge it denied would never reach the store", i, why)
			return
		}
		if fw, ok := lim.(algo.FixedWindow); ok && fw.Calendar != (algo.Calendar{}) {
			l.Errorf(e.Key, path, "limit %d is a calendar window: %s are for windows of a duration", i, what)
			return
		}
	}
}

// withoutDebt returns the plans an Estimate decides with in place of
// plans: each with debt compiled again without it, once, at load (nil
// when none has debt).
func withoutDebt(plans []plan) []algo.Plan {
	if !slices.ContainsFunc(plans, func(p plan) bool { return p.Debt() }) {
		return nil
	}
	out := make([]algo.Plan, len(plans))
	for i := range out {
		out[i] = plans[i].Plan
		if out[i].Debt() {
			out[i] = *algo.MustCompile(out[i].Limit().(algo.Debt).Limit)
		}
	}
	return out
}

// countNode makes every limit of a node debt under counts: each or
// stop_when_over (debtNode), a node of one fixed window from owing.
func (l *loader) countNode(nd *node, key ast.Node, path string) {
	fw, ok := nd.limits[0].(algo.FixedWindow)
	if len(nd.limits) != 1 || !ok {
		l.debtNode(nd, key, path, "counts: "+countings[l.counts]+" records a denied charge: ")
		return
	}
	o, ok := l.owing[fw]
	if !ok {
		l.debtNode(nd, key, path, "")
		o = owed{nd.limits[0], nd.specs[0], nd.plans[0], withoutDebt(nd.plans)}
		if l.owing == nil {
			l.owing = map[algo.FixedWindow]owed{}
		}
		l.owing[fw] = o
	}
	nd.limits[0], nd.specs[0], nd.plans[0], nd.noDebt = o.limit, o.spec, o.plan, o.noDebt
}

// debtNode makes every limit of a node with debt: true (or of every node
// under counts: each or stop_when_over) one with debt (algo.Debt),
// refusing the kinds that cannot record one (at key, why first).
func (l *loader) debtNode(nd *node, key ast.Node, path, why string) {
	for i := range nd.specs {
		s := nd.specs[i]
		s.Debt = true
		lim, err := s.Build()
		if err == nil {
			nd.plans[i].Plan, err = algo.Compile(lim)
		}
		if err != nil {
			l.Errorf(key, path, "%slimit %d: %s", why, i, strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "))
			continue
		}
		nd.limits[i], nd.specs[i] = lim, s
	}
}

// delayNode checks a node's delay and makes its plans the reserving ones
// (algo.Reserving): a decision then admits a cost that its limits
// would admit within the delay, reserved, and the caller waits.
func (l *loader) delayNode(nd *node, e *yamlfile.Entry, hasLimits bool, path string) {
	switch {
	case nd.delay <= 0 || nd.delay > maxDelay:
		l.Errorf(e.Value, yamlfile.Sub(path, "max"), "want a delay above 0 and at most %v, got %v", maxDelay, nd.delay)
		nd.delay = 0
		return
	case !hasLimits:
		l.Errorf(e.Key, path, "delay needs the node's own limits")
		nd.delay = 0
		return
	}
	for i := range nd.plans {
		r, err := algo.Reserving(&nd.plans[i].Plan, nd.delay)
		if err != nil {
			l.Errorf(e.Key, path, "limit %d is %s: delay is for %s, which refill steadily and can reserve ahead", i, nd.plans[i].Kind(), delayableKinds())
			nd.delay = 0
			return
		}
		nd.plans[i].Plan = r
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
	v, ok := l.Deref(n, path)
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
			l.Errorf(v, path, "limits is empty")
			return nil
		}
		if l.scalars(v) {
			add(l.shorthand(v, path))
			return out
		}
		for i, e := range v.Values {
			p := fmt.Sprintf("%s[%d]", path, i)
			ev, ok := l.Deref(e, p)
			if !ok {
				continue
			}
			switch ev := ev.(type) {
			case *ast.MappingNode:
				add(l.spec(ev, p))
			case *ast.SequenceNode:
				add(l.shorthand(ev, p))
			default:
				l.Errorf(ev, p, "want a limit mapping or a [burst, count, period] list, got %s", yamlfile.Describe(ev))
			}
		}
	default:
		if yamlfile.IsNull(v) {
			l.Errorf(key, path, "limits is empty")
		} else {
			l.Errorf(v, path, "want a list of limits, a limit mapping or [burst, count, period], got %s", yamlfile.Describe(v))
		}
	}
	return out
}

// scalars reports whether every entry of the sequence is a scalar.
func (l *loader) scalars(s *ast.SequenceNode) bool {
	for _, e := range s.Values {
		v := l.Peek(e)
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
		l.Errorf(s, path, "a [burst, count, period] shorthand has 3 values, got %d", len(s.Values))
		return compiled{}, false
	}
	spec := algo.Spec{Algorithm: algo.KindGCRA.String()}
	ok := l.Decode(s.Values[0], reflect.ValueOf(&spec.Burst).Elem(), path+".burst")
	ok = l.Decode(s.Values[1], reflect.ValueOf(&spec.Count).Elem(), path+".count") && ok
	period, pok := l.Deref(s.Values[2], path+".period")
	if pok {
		if i, isInt := period.(*ast.IntegerNode); isInt {
			secs, iok := yamlfile.IntValue(i)
			if !iok || secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
				l.Errorf(period, path+".period", "%s seconds is out of range", yamlfile.NodeText(period))
				pok = false
			} else {
				spec.Period = time.Duration(secs) * time.Second
			}
		} else if v, big := yamlfile.OutOfRange(period); big {
			l.Errorf(period, path+".period", "%s seconds is out of range", v)
			pok = false
		} else if _, isStr := yamlfile.StringValue(period); isStr {
			pok = l.Decode(period, reflect.ValueOf(&spec.Period).Elem(), path+".period")
		} else {
			l.Errorf(period, path+".period", "want seconds or a duration such as \"60s\", got %s", yamlfile.Describe(period))
			pok = false
		}
	}
	if !ok || !pok {
		return compiled{}, false
	}
	fields := map[string]ast.Node{"burst": l.Peek(s.Values[0]), "count": l.Peek(s.Values[1]), "period": period}
	return l.build(spec, fields, s, path)
}

// spec compiles a mapping of algo.Spec fields.
//
// A GCRA or token bucket may give its rate plainly, as rate: N/duration
// ({algorithm: gcra, burst: 15, rate: 30/1m} is burst 15, count 30, period
// 1m; for token_bucket it is rate 30, per 1m).
func (l *loader) spec(m *ast.MappingNode, path string) (compiled, bool) {
	var spec algo.Spec
	m, plain, at := takeField(m, "rate", func(v string) bool { return strings.Contains(v, "/") }) // "N/duration"
	m, calendar, calAt := takeField(m, "window", algo.IsCalendarUnit)
	fields, ok := l.DecodeStruct(m, reflect.ValueOf(&spec).Elem(), path)
	if !ok {
		return compiled{}, false
	}
	if at := growthZero(fields["block"]); at != nil { // would read as no block after the first
		l.Errorf(at, path+".block.growth", "block growth must be 1 to %d, got 0 (leave it out for 1)", algo.MaxGrowth)
		return compiled{}, false
	}
	if calAt != nil {
		spec.Calendar, fields["window"] = calendar, calAt
	}
	if at != nil {
		n, per, err := parseRate(plain)
		switch {
		case err != nil:
			l.Errorf(at, yamlfile.Sub(path, "rate"), "%v", err)
			return compiled{}, false
		case spec.Algorithm == algo.KindGCRA.String() && spec.Count == 0 && spec.Period == 0:
			spec.Count, spec.Period = n, per
		case spec.Algorithm == algo.KindTokenBucket.String() && spec.Per == 0:
			spec.Rate, spec.Per = n, per
		default:
			l.Errorf(at, yamlfile.Sub(path, "rate"), "rate: N/duration is for gcra (without count and period) and token_bucket (without per)")
			return compiled{}, false
		}
		fields["rate"] = at
	}
	return l.build(spec, fields, m, path)
}

// parseRate reads a rate written plainly, "N/duration" such as "30/1m"
// or "5/s" (a bare unit is one of it: s, m, h): N actions per duration.
func parseRate(s string) (n int64, per time.Duration, err error) {
	num, d, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: want N/duration such as 30/1m", s)
	}
	n, err = strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 {
		return 0, 0, fmt.Errorf("rate %q: the count must be a positive integer", s)
	}
	d = strings.TrimSpace(d)
	if d != "" && (d[0] < '0' || d[0] > '9') {
		d = "1" + d
	}
	per, err = time.ParseDuration(d)
	if err != nil || per <= 0 {
		return 0, 0, fmt.Errorf("rate %q: the period must be a positive duration such as 1m", s)
	}
	return n, per, nil
}

// growthZero returns the value of a block's growth when it is written as
// 0, which Block reads as unset (1), else nil.
func growthZero(block ast.Node) ast.Node {
	m, ok := block.(*ast.MappingNode)
	if !ok {
		return nil
	}
	for _, kv := range m.Values {
		if k, ok := yamlfile.StringValue(kv.Key); !ok || k != "growth" {
			continue
		}
		switch v := kv.Value.(type) {
		case *ast.IntegerNode:
			if f, err := strconv.ParseFloat(v.Token.Value, 64); err == nil && f == 0 {
				return v
			}
		case *ast.FloatNode:
			if v.Value == 0 {
				return v
			}
		}
	}
	return nil
}

// takeField takes the field name out of a mapping when its value is text
// that is: it returns the mapping without it, the text and where it is
// (nil when the field is not there, or not such text). A calendar window
// (window: month) is taken so, since a Spec's window is a duration.
func takeField(m *ast.MappingNode, name string, is func(string) bool) (*ast.MappingNode, string, ast.Node) {
	for i, kv := range m.Values {
		k, ok := yamlfile.StringValue(kv.Key)
		if !ok || k != name {
			continue
		}
		v, ok := yamlfile.StringValue(kv.Value)
		if !ok || !is(v) {
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
		words := strings.FieldsFunc(msg, yamlfile.NotWord)
		for i, w := range words {
			if n, ok := fields[w]; ok {
				pos, field = n, path+"."+w
				if w == "block" && i+1 < len(words) {
					field += "." + words[i+1] // "block for must be ...": block.for
				}
				break
			}
		}
		l.Add(l.Pos(pos), nil, field, msg, err)
		return compiled{}, false
	}
	return compiled{spec: spec, limit: lim, plan: plan}, true
}

// maxEscalate bounds the blocks or denials an escalate counts.
const maxEscalate = 1000

// escalation reads a node's escalate: {blocks: N} or {denials: N}, within
// a window, and the block it starts.
func (l *loader) escalation(v ast.Node, path string) *escalation {
	var ec struct {
		Blocks  int64         `yaml:"blocks"`
		Denials int64         `yaml:"denials"`
		Within  time.Duration `yaml:"within"`
		Block   *algo.Block   `yaml:"block"`
	}
	if !l.Decode(v, reflect.ValueOf(&ec).Elem(), path) {
		return nil
	}
	n := max(ec.Blocks, ec.Denials)
	switch {
	case (ec.Blocks == 0) == (ec.Denials == 0):
		l.Errorf(v, path, "want one of blocks: N (the blocks that start below) or denials: N (the denials below), such as {blocks: 3, within: 1h, block: {for: 1h}}")
		return nil
	case n < 1 || n > maxEscalate:
		l.Errorf(v, path, "want blocks or denials of 1 to %d, got %d", maxEscalate, n)
		return nil
	case ec.Within <= 0:
		l.Errorf(v, path, "want within: a positive window, such as 1h, in which the %d are counted", n)
		return nil
	case ec.Block == nil:
		l.Errorf(v, path, "want block: {for: D, ...}, the block the %dth starts", n)
		return nil
	}
	lim := algo.Blocking{Limit: algo.FixedWindow{Count: n - 1, Window: ec.Within}, Block: *ec.Block}
	p, err := algo.Compile(lim)
	if err != nil {
		l.Errorf(v, path, "%s", strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "))
		return nil
	}
	return &escalation{limit: lim, plan: plan{Plan: p, form: formOf(l.forms, lim)}, denials: ec.Denials > 0}
}

// escalateNode checks a node's escalate against the nodes below it: it
// needs some, one with a block when it counts blocks, and none with a
// lease (a leased decision does not reach the script that counts).
func (l *loader) escalateNode(nd *node, e *yamlfile.Entry, path string) {
	var below []*node
	var collect func(n *node)
	collect = func(n *node) {
		for _, c := range n.children {
			below = append(below, c)
			collect(c)
		}
		for _, c := range n.globs {
			below = append(below, c)
			collect(c)
		}
		if n.star != nil {
			below = append(below, n.star)
			collect(n.star)
		}
	}
	collect(nd)
	blocks := false
	for _, c := range below {
		if c.lease {
			l.Errorf(e.Key, path, "%s below says lease: true: a leased decision never reaches the step that counts for escalate", c.pattern)
			return
		}
		for _, lim := range c.limits {
			_, ok := lim.(algo.Blocking)
			blocks = blocks || ok
		}
	}
	switch {
	case nd.lease:
		l.Errorf(e.Key, path, "escalate beside lease: true: a leased decision never reaches the step that counts")
	case len(below) == 0:
		l.Errorf(e.Key, path, "escalate counts what the nodes below do, and the node has no children")
	case !nd.escalate.denials && !blocks:
		l.Errorf(e.Key, path, "escalate: {blocks: ...} counts the blocks that start below, and no limit below has a block (give one block: {for: ...}, or count denials)")
	}
}
