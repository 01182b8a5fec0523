package envoyimport

import (
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/sluicehq/sluice/policy"
)

// FromXDS converts the RateLimitConfig resources of an xDS update, one
// domain each, as Convert converts files, straight to the policy named
// name: no text is written or parsed (an update of 100,000 descriptors
// cost gigabytes so), and the policy's tree shares what its descriptors
// share (a leaf's limit). Errors name "xds:" and the config's name, then
// the field, such as descriptors[3].rate_limit.unit. counts is the
// policy's, as Convert's.
func FromXDS(name string, configs []*rlsconfv3.RateLimitConfig, counts string) (*policy.Policy, []string, error) {
	c := &converter{}
	top := &node{}
	for _, rc := range configs {
		c.file = File{Name: "xds:" + rc.GetName()}
		c.domain(top, root{Domain: scalar(rc.GetDomain()), Descriptors: fromProto(rc.GetDescriptors(), 1)})
	}
	if err := c.err(); err != nil {
		return nil, c.warned(), err
	}
	p, err := policy.ParseTree(name, newTree().file(top, countsOr(counts)))
	if err != nil {
		return nil, c.warned(), fmt.Errorf("the xDS configuration converted to an invalid policy (a bug): %w", err)
	}
	return p, c.warned(), nil
}

// fromProto reads descriptors as a file holds them, to maxNesting+1 deep
// (descriptors gives the warning for what is deeper).
func fromProto(ds []*rlsconfv3.RateLimitDescriptor, level int) []descriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptor, len(ds))
	for i, d := range ds {
		o := &out[i]
		o.Key, o.Value = scalar(d.GetKey()), scalar(d.GetValue())
		o.ShadowMode, o.DetailedMetric = d.GetShadowMode(), d.GetDetailedMetric()
		if rl := d.GetRateLimit(); rl != nil {
			r := &rateLimit{Unlimited: rl.GetUnlimited(), Name: scalar(rl.GetName())}
			if !r.Unlimited {
				n := rl.GetRequestsPerUnit()
				r.RequestsPerUnit = &n
				r.Unit = strings.ToLower(rl.GetUnit().String())
			}
			for _, x := range rl.GetReplaces() {
				r.Replaces = append(r.Replaces, struct {
					Name scalar `yaml:"name"`
				}{scalar(x.GetName())})
			}
			o.RateLimit = r
		}
		if level <= maxNesting {
			o.Descriptors = fromProto(d.GetDescriptors(), level+1)
		} else if len(d.GetDescriptors()) > 0 {
			o.Descriptors = []descriptor{{}} // deeper than a request reaches: dropped, with a warning
		}
	}
	return out
}

// tree builds the YAML tree of the limits.yaml write writes, without text.
type tree struct {
	tk     *token.Token        // every node's: no position
	leaves map[string]ast.Node // a node of limits only, by its limit
}

func newTree() *tree {
	return &tree{
		tk:     &token.Token{Type: token.StringType, Position: &token.Position{Line: 1, Column: 1}},
		leaves: map[string]ast.Node{},
	}
}

func (t *tree) str(s string) *ast.StringNode {
	return &ast.StringNode{BaseNode: &ast.BaseNode{}, Token: t.tk, Value: s}
}

func (t *tree) entry(key string, v ast.Node) *ast.MappingValueNode {
	return ast.MappingValue(t.tk, t.str(key), v)
}

func (t *tree) mapping(es ...*ast.MappingValueNode) *ast.MappingNode {
	return ast.Mapping(t.tk, false, es...)
}

func (t *tree) boolean() ast.Node {
	return ast.Bool(&token.Token{Type: token.BoolType, Value: "true", Position: t.tk.Position})
}

// file returns the tree of the whole limits.yaml.
func (t *tree) file(top *node, counts string) ast.Node {
	return t.mapping(t.entry("unmatched", t.str("allow")), t.entry("counts", t.str(counts)), t.entry("schema", t.children(top)))
}

// children returns the mapping of n's children, "*" last as write writes it.
func (t *tree) children(n *node) *ast.MappingNode {
	m := ast.Mapping(t.tk, false)
	m.Values = make([]*ast.MappingValueNode, 0, len(n.names))
	var star *node
	for _, name := range n.names {
		if name == "*" {
			star = n.children[name]
			continue
		}
		m.Values = append(m.Values, t.entry(name, t.node(n.children[name])))
	}
	if star != nil {
		m.Values = append(m.Values, t.entry("*", t.node(star)))
	}
	return m
}

// node returns the mapping of one node.
func (t *tree) node(c *node) ast.Node {
	onlyLimit := c.limit != "" && !c.unlim && !c.shadow && !c.quota && !c.shared && c.name == "" && len(c.replaces) == 0 && len(c.names) == 0
	if onlyLimit {
		if l, ok := t.leaves[c.limit]; ok {
			return l
		}
	}
	var es []*ast.MappingValueNode
	if c.unlim {
		es = append(es, t.entry("unlimited", t.boolean()))
	}
	if c.shadow {
		es = append(es, t.entry("shadow", t.boolean()))
	}
	if c.quota {
		es = append(es, t.entry("quota_mode", t.boolean()))
	}
	if c.shared {
		es = append(es, t.entry("shared_counter", t.boolean()))
	}
	if c.name != "" {
		es = append(es, t.entry("name", t.str(c.name)))
	}
	if len(c.replaces) > 0 {
		seq := ast.Sequence(t.tk, true)
		for _, r := range c.replaces {
			seq.Values = append(seq.Values, t.str(r))
		}
		es = append(es, t.entry("replaces", seq))
	}
	if c.limit != "" {
		count := ast.Integer(&token.Token{Type: token.IntegerType, Value: strconv.FormatUint(uint64(c.perUnit), 10), Position: t.tk.Position})
		es = append(es, t.entry("limits", ast.Mapping(t.tk, true,
			t.entry("algorithm", t.str("fixed_window")), t.entry("limit", count), t.entry("window", t.str(c.window)))))
	}
	if len(c.names) > 0 {
		es = append(es, t.entry("children", t.children(c)))
	}
	m := t.mapping(es...)
	if onlyLimit {
		t.leaves[c.limit] = m
	}
	return m
}
