// Package envoyimport converts envoyproxy/ratelimit configuration files
// into a Sluice limits.yaml whose tree the service's gRPC ShouldRateLimit
// (package server) matches exactly as envoyproxy/ratelimit matches the
// original configuration: `sluice import-envoy`.
//
// Each configuration file holds one domain and its nested descriptors:
//
//	domain: mongo_cps
//	descriptors:
//	  - key: database
//	    value: users
//	    rate_limit: {unit: second, requests_per_unit: 500}
//	  - key: database             # any other database
//	    rate_limit: {unit: second, requests_per_unit: 50}
//
// The service maps a descriptor of domain D with entries (k1, v1) … (kn,
// vn) to the path D/k1/v1/…/kn/vn and applies only the limits of the node
// the whole path reaches (see the server's descriptorPath). So the conversion is:
//
//   - a domain is a top-level node; several files (a directory, as Envoy's
//     service loads its config directory) are several domains, each at
//     most once;
//   - a descriptor {key: K, value: V} is the child V of the child K of its
//     parent; a descriptor with no value is the child "*" of K, which any
//     value matches, with one counter per value (as Envoy keys its
//     counters by the request's values); a named value wins over "*", as
//     key_value wins over key in Envoy; value "*" is "*" too;
//   - a value with "*" elsewhere ("pre*", "/api/*/action") is a child
//     whose name is that pattern (policy: each "*" matches any run of
//     bytes; patterns are tried in file order after the named values and
//     before "*"), with a counter per matching value, or one for all of
//     them with share_threshold: true (shared_counter: true);
//   - rate_limit {requests_per_unit: N, unit: U} is a fixed_window limit of
//     N per U, windows aligned to the epoch as Envoy's are (second 1s,
//     minute 1m, hour 1h, day 24h, week 168h, month 720h, year 8760h, as
//     Envoy's service counts them); N = 0 is a window that admits nothing;
//   - rate_limit's name and replaces are the node's name and replaces:
//     when the descriptors of one request hit a node that another replaces,
//     it is neither checked nor counted;
//   - unlimited: true is unlimited: true, and a descriptor without
//     rate_limit and without nested descriptors becomes unlimited: true
//     too (Sluice has no empty nodes; both are never limited);
//   - shadow_mode: true is shadow: true, which for Envoy's matching (a
//     descriptor reaches one node) shadows that node's limits only;
//   - detailed_metric (with a warning) and value_to_metric shape only
//     Envoy's metrics and are dropped (Sluice's metrics are by node
//     pattern); metadata is dropped with a warning (Sluice's answers carry
//     none); a rate_limit's name is the node's name, which answers carry
//     as current_limit.name;
//   - quota_mode: true is quota_mode: true: the node never denies (it is
//     shadow), and the service answers its denial as envoyproxy/ratelimit
//     answers an over-quota descriptor (OK, nothing left, no reset);
//   - a domain without descriptors is a node with unlimited: true, as
//     Envoy limits nothing in it.
//
// Errors name the file, line and field, in the format of a limits.yaml's
// (yamlfile.Decode): an unknown field or unit, a key that is not a string,
// a list of something else than mappings, a missing domain or key, a
// missing requests_per_unit, a unit next to unlimited, an empty replaces
// name or one that names its own descriptor, duplicate descriptors and
// domains, share_threshold on a value without "*". An
// unlimited descriptor with nested descriptors loses its own "unlimited"
// status (its answer has no limit instead of limit_remaining 2^32-1; both
// are OK).
package envoyimport

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/sluicehq/sluice/internal/yamlfile/parser"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
)

// File is one envoyproxy/ratelimit configuration file.
type File struct {
	Name string
	Data []byte
}

// units maps Envoy's rate limit units (lower case) to their lengths as
// envoyproxy/ratelimit counts them.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

type root struct {
	Domain      scalar       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

type descriptor struct {
	Key            scalar       `yaml:"key"`
	Value          scalar       `yaml:"value"`
	RateLimit      *rateLimit   `yaml:"rate_limit"`
	Descriptors    []descriptor `yaml:"descriptors"`
	ShadowMode     bool         `yaml:"shadow_mode"`
	QuotaMode      bool         `yaml:"quota_mode"`
	DetailedMetric bool         `yaml:"detailed_metric"`
	ValueToMetric  bool         `yaml:"value_to_metric"`
	ShareThreshold bool         `yaml:"share_threshold"`
	Metadata       *anything    `yaml:"metadata"`
}

// scalar is a string field of Envoy's format, which takes any scalar as
// its text, as Envoy's YAML library does (value: 10 is "10"; a null is "").
type scalar string

// UnmarshalYAML implements the YAML unmarshaler.
func (s *scalar) UnmarshalYAML(unmarshal func(any) error) error {
	var str string
	if unmarshal(&str) == nil {
		*s = scalar(str)
		return nil
	}
	var i int64
	if unmarshal(&i) == nil {
		*s = scalar(strconv.FormatInt(i, 10))
		return nil
	}
	var f float64
	if unmarshal(&f) == nil {
		*s = scalar(strconv.FormatFloat(f, 'g', -1, 64))
		return nil
	}
	var b bool
	if unmarshal(&b) == nil {
		*s = scalar(strconv.FormatBool(b))
		return nil
	}
	return errors.New("want a string")
}

// anything accepts any YAML value: a descriptor's metadata, which Envoy
// takes as it is.
type anything struct{}

// UnmarshalYAML implements the YAML unmarshaler: anything goes.
func (*anything) UnmarshalYAML(func(any) error) error { return nil }

type rateLimit struct {
	RequestsPerUnit *uint32 `yaml:"requests_per_unit"`
	Unit            string  `yaml:"unit"`
	Unlimited       bool    `yaml:"unlimited"`
	Name            scalar  `yaml:"name"`
	Replaces        []struct {
		Name scalar `yaml:"name"`
	} `yaml:"replaces"`
}

// node is one node of the tree being built.
type node struct {
	names    []string // children in order of appearance
	children map[string]*node
	limit    string // the fixed_window limit as YAML flow mapping, or ""
	perUnit  uint32 // the limit's count
	window   string // the limit's window, such as "1m"
	shadow   bool
	quota    bool // quota_mode
	unlim    bool
	shared   bool // a pattern whose matches share one counter
	name     string
	replaces []string
	comments []string
}

func (n *node) child(name string) (*node, bool) {
	if n.children == nil {
		n.children = map[string]*node{}
	}
	c, ok := n.children[name]
	if !ok {
		c = &node{}
		n.children[name] = c
		n.names = append(n.names, name)
	}
	return c, ok
}

// converter collects errors and warnings, at most maxReported of each
// (each is positioned by a walk of its file's tree), and counts the rest.
type converter struct {
	errs, warnings      []string
	moreErrs, moreWarns int
	file                File
	ast                 *ast.File
	parsed              bool // ast is file's, parsed when first needed
	count               int  // descriptors converted, bounded by maxDescriptors
}

// maxReported bounds the errors, and the warnings, listed one by one.
const maxReported = 100

// maxNesting is the nesting of descriptors a request can reach: the
// service takes at most 31 entries in a descriptor (server's maxEntries).
const maxNesting = 31

// maxDescriptors bounds the descriptors of one conversion, all domains
// together: more than a file within yamlfile's bounds holds, and than an
// xDS update of 4 MiB (gRPC's bound) holds of descriptors with limits.
const maxDescriptors = 200_000

// Convert converts the files (one domain each) into one limits.yaml whose
// counts is counts (the policy's top-level field; each when empty, as
// envoyproxy/ratelimit counts). It returns the text, warnings about what
// was ignored, and an error listing every problem when something cannot
// be converted. The text is checked with policy.Parse before it is
// returned.
func Convert(files []File, counts string) ([]byte, []string, error) {
	c := &converter{}
	top := &node{}
	for _, f := range files {
		c.file, c.ast, c.parsed = f, nil, false
		var r root
		if err := yamlfile.Decode(f.Name, f.Data, &r); err != nil {
			var list yamlfile.ErrorList
			if !errors.As(err, &list) {
				return nil, c.warnings, err
			}
			for _, e := range list {
				c.add(&c.errs, &c.moreErrs, e.Error())
			}
			continue
		}
		c.domain(top, r)
	}
	if err := c.err(); err != nil {
		return nil, c.warned(), err
	}
	var b bytes.Buffer
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	fmt.Fprintf(&b, "# Converted by sluice import-envoy from %s.\n", strings.Join(names, ", "))
	b.WriteString(`# sluice serve's gRPC ShouldRateLimit maps domain D and descriptor entries
# (k1, v1) ... (kn, vn) to the path D/k1/v1/.../kn/vn and applies the limits of
# the node that whole path reaches, as envoyproxy/ratelimit does: a key
# without a value is "*" (one counter per value), requests_per_unit per unit
# is a fixed window aligned to the epoch. counts: each counts every
# descriptor's hits on its own, admitted or denied, as envoyproxy/ratelimit
# does.
unmatched: allow
`)
	fmt.Fprintf(&b, "counts: %s\nschema:\n", countsOr(counts))
	write(&b, top, 1)
	out := b.Bytes()
	if _, err := policy.Parse("import-envoy output", out); err != nil {
		return nil, c.warned(), fmt.Errorf("import-envoy produced an invalid policy (a bug): %w", err)
	}
	return out, c.warned(), nil
}

// countsOr is counts, or each when it is empty: Envoy's.
func countsOr(counts string) string {
	if counts == "" {
		return "each"
	}
	return counts
}

// domain converts one domain's configuration under top.
func (c *converter) domain(top *node, r root) {
	if r.Domain == "" {
		c.errorf(nil, "", "config file cannot have an empty domain")
		return
	}
	d, dup := top.child(string(r.Domain))
	if dup {
		c.errorf(nil, "domain", "domain %q is already defined by another file", r.Domain)
		return
	}
	d.comments = append(d.comments, "domain "+string(r.Domain)+" ("+c.file.Name+")")
	c.descriptors(d, r.Descriptors, nil, 1)
	if len(r.Descriptors) == 0 {
		// Envoy loads it and limits nothing in it.
		d.unlim = true
		d.comments = append(d.comments, "no descriptors: Envoy limits nothing in this domain")
	}
}

// err returns the errors found, or nil.
func (c *converter) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	errs := c.errs
	if c.moreErrs > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Sprintf("and %d more errors", c.moreErrs))
	}
	return errors.New(strings.Join(errs, "\n"))
}

// warned returns the warnings.
func (c *converter) warned() []string {
	if c.moreWarns > 0 {
		return append(c.warnings[:len(c.warnings):len(c.warnings)], fmt.Sprintf("and %d more warnings", c.moreWarns))
	}
	return c.warnings
}

// add appends msg to list, or counts it past maxReported.
func (c *converter) add(list *[]string, more *int, msg string) {
	if len(*list) >= maxReported {
		*more++
		return
	}
	*list = append(*list, msg)
}

// dpath is the path of a descriptor: the index in its parent's list,
// written out only for a message (each descriptor's would cost its
// depth).
type dpath struct {
	parent *dpath
	i      int
}

// String returns the YAML path, such as $.descriptors[0].descriptors[3].
func (p *dpath) String() string {
	if p == nil {
		return "$"
	}
	return fmt.Sprintf("%s.descriptors[%d]", p.parent, p.i)
}

// descriptors converts a list of descriptors, at a nesting of level,
// under the node of their parent (a domain or a value node).
func (c *converter) descriptors(parent *node, ds []descriptor, path *dpath, level int) {
	if level > maxNesting {
		c.warnf(path, "descriptors", "descriptors nested deeper than %d are dropped: no request reaches them (a descriptor has at most %d entries)", maxNesting, maxNesting)
		return
	}
	for i, d := range ds {
		if c.count++; c.count > maxDescriptors {
			if c.count == maxDescriptors+1 {
				c.errorf(path, "", "more than %d descriptors", maxDescriptors)
			}
			return
		}
		p := &dpath{path, i}
		if d.Key == "" {
			c.errorf(p, "", "descriptor has no key")
			continue
		}
		value := string(d.Value)
		if value == "" {
			value = "*"
		}
		k, _ := parent.child(string(d.Key))
		v, dup := k.child(value)
		if dup {
			if d.Value == "" || d.Value == "*" {
				c.errorf(p, "", "descriptor %s has both a key-only form and the wildcard value \"*\" (or is repeated): they are one node in Sluice", d.Key)
			} else {
				c.errorf(p, "", "duplicate descriptor %s_%s", d.Key, d.Value)
			}
			continue
		}
		if d.Metadata != nil {
			c.warnf(p, "metadata", "metadata is dropped: Sluice's answers carry no descriptor metadata")
		}
		if d.DetailedMetric {
			c.warnf(p, "detailed_metric", "detailed_metric is dropped: Sluice's metrics count by policy node (sluice_decisions_total{node}), never by descriptor value; sluice explain and /admin/v1/consumers show a key's state")
		}
		if d.ShareThreshold {
			if !strings.Contains(string(d.Value), "*") || d.Value == "*" {
				c.errorf(p, "share_threshold", "share_threshold is for a value with a wildcard such as \"files/*\"")
				continue
			}
			v.shared = true
		}
		if rl := d.RateLimit; rl != nil {
			v.name = string(rl.Name)
			bad := false
			for j, r := range rl.Replaces {
				switch r.Name {
				case "":
					c.errorf(p, fmt.Sprintf("rate_limit.replaces[%d]", j), "should not have an empty replaces entry")
					bad = true
				case rl.Name:
					c.errorf(p, fmt.Sprintf("rate_limit.replaces[%d]", j), "replaces should not contain the name of the same descriptor (%q)", rl.Name)
					bad = true
				default:
					v.replaces = append(v.replaces, string(r.Name))
				}
			}
			if bad {
				continue
			}
			if rl.Unlimited {
				if rl.Unit != "" {
					c.errorf(p, "rate_limit.unit", "should not specify rate limit unit when unlimited")
					continue
				}
				v.unlim = true
			} else {
				unit, ok := units[strings.ToLower(rl.Unit)]
				switch {
				case !ok:
					c.errorf(p, "rate_limit.unit", "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", rl.Unit)
					continue
				case rl.RequestsPerUnit == nil:
					c.errorf(p, "rate_limit", "requests_per_unit is missing")
					continue
				}
				// requests_per_unit 0 is a window that admits nothing.
				v.perUnit, v.window = *rl.RequestsPerUnit, durationText(unit)
				v.limit = fmt.Sprintf("{algorithm: fixed_window, limit: %d, window: %s}", v.perUnit, v.window)
				// Shadow wins: Envoy's shadow_mode answers OK before its
				// quota_mode sees a denial.
				v.shadow = d.ShadowMode
				v.quota = d.QuotaMode && !d.ShadowMode
			}
		}
		if len(d.Descriptors) > 0 {
			c.descriptors(v, d.Descriptors, p, level+1)
			if v.unlim {
				v.unlim = false
				v.comments = append(v.comments, "unlimited in Envoy; its nested descriptors are limited")
			}
		}
		if v.limit == "" && !v.unlim && len(v.names) == 0 {
			v.unlim = true
			v.comments = append(v.comments, "no rate_limit in the Envoy config: never limited")
		}
		if v.unlim && (v.name != "" || len(v.replaces) > 0) {
			v.name, v.replaces = "", nil // nothing to replace or be replaced
		}
	}
}

// write writes the children of n at the given depth of "children:" maps.
func write(b *bytes.Buffer, n *node, depth int) {
	ind := strings.Repeat("  ", 2*depth-1)
	names := append([]string(nil), n.names...)
	// "*" last, for the reader: the named children are tried first anyway.
	sort.SliceStable(names, func(i, j int) bool { return names[i] != "*" && names[j] == "*" })
	for _, name := range names {
		c := n.children[name]
		fmt.Fprintf(b, "%s%s:", ind, strconv.Quote(name))
		if len(c.comments) > 0 {
			fmt.Fprintf(b, " # %s", strings.Join(c.comments, "; "))
		}
		b.WriteByte('\n')
		in := ind + "  "
		if c.unlim {
			fmt.Fprintf(b, "%sunlimited: true\n", in)
		}
		if c.shadow {
			fmt.Fprintf(b, "%sshadow: true\n", in)
		}
		if c.quota {
			fmt.Fprintf(b, "%squota_mode: true\n", in)
		}
		if c.shared {
			fmt.Fprintf(b, "%sshared_counter: true\n", in)
		}
		if c.name != "" {
			fmt.Fprintf(b, "%sname: %s\n", in, strconv.Quote(c.name))
		}
		if len(c.replaces) > 0 {
			q := make([]string, len(c.replaces))
			for i, r := range c.replaces {
				q[i] = strconv.Quote(r)
			}
			fmt.Fprintf(b, "%sreplaces: [%s]\n", in, strings.Join(q, ", "))
		}
		if c.limit != "" {
			fmt.Fprintf(b, "%slimits: %s\n", in, c.limit)
		}
		if len(c.names) > 0 {
			fmt.Fprintf(b, "%schildren:\n", in)
			write(b, c, depth+1)
		}
	}
}

func durationText(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// errorf reports a problem with field of the descriptor at d (nil: the
// file's top level; field "": the descriptor).
func (c *converter) errorf(d *dpath, field, format string, args ...any) {
	if len(c.errs) >= maxReported {
		c.moreErrs++
		return
	}
	c.errs = append(c.errs, c.pos(d, field)+": "+fmt.Sprintf(format, args...))
}

func (c *converter) warnf(d *dpath, field, format string, args ...any) {
	if len(c.warnings) >= maxReported {
		c.moreWarns++
		return
	}
	c.warnings = append(c.warnings, c.pos(d, field)+": "+fmt.Sprintf(format, args...))
}

// pos renders "file:line:col: field" for field of the descriptor at d,
// such as $.descriptors[0].rate_limit.unit.
func (c *converter) pos(d *dpath, field string) string {
	path := d.String()
	if field != "" {
		path += "." + field
	}
	if !c.parsed && c.file.Data != nil {
		c.ast, _ = parser.ParseBytes(c.file.Data, 0) // within yamlfile's bounds: Decode took it
		c.parsed = true
	}
	return c.at(path)
}

// at renders "file:line:col: field" for a YAML path.
func (c *converter) at(path string) string {
	field := strings.TrimPrefix(strings.TrimPrefix(path, "$"), ".")
	if c.ast != nil && path != "$" {
		for p := path; p != ""; p = parentPath(p) {
			yp, err := yaml.PathString(p)
			if err != nil {
				break
			}
			if n, err := yp.FilterFile(c.ast); err == nil && n != nil {
				if t := n.GetToken(); t != nil {
					if field == "" {
						return fmt.Sprintf("%s:%d:%d", c.file.Name, t.Position.Line, t.Position.Column)
					}
					return fmt.Sprintf("%s:%d:%d: %s", c.file.Name, t.Position.Line, t.Position.Column, field)
				}
			}
			if p == "$" {
				break
			}
		}
	}
	if field == "" {
		return c.file.Name
	}
	return c.file.Name + ": " + field
}

// parentPath drops the last element of a YAML path ("$" has none).
func parentPath(p string) string {
	if p == "$" {
		return ""
	}
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return "$"
	}
	return p[:i]
}
