package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// An Override changes a node's limits for one of its keys, or for the keys
// a glob matches, at runtime and without a reload: an exact limit
// (Limits) or the node's own limits with their counts times Factor (10:
// ten times as many), until a time or for good. Overrides are kept in the
// store (store.Board), so that every instance that polls it (Refresh)
// applies them. A key's state carries over when the override keeps the
// node's number of limits.
type Override struct {
	// Node is the node's pattern, such as "key/*".
	Node string `json:"node"`
	// Key is the level's key, such as "key:acme", or a glob of keys
	// ("key:trial-*", path.Match's).
	Key    string      `json:"key"`
	Limits []algo.Spec `json:"limits,omitempty"`
	Factor float64     `json:"factor,omitempty"`
	// Until is when it ends, by the store's clock (the zero Time: never).
	Until time.Time `json:"until,omitzero"`
}

// Bounds of overrides: a factor, and the limits of one.
const (
	maxFactor         = 1e6
	maxOverrideLimits = 8
)

// Target returns the node a whole path reaches, which must have limits,
// and the path's key there: what an Override names. A last segment with
// *, ? or [ makes the key a glob of keys.
func (p *Policy) Target(path []string) (node, key string, err error) {
	m := p.Match(path)
	if m.Depth != len(path) || len(m.Hits) == 0 || m.Hits[len(m.Hits)-1].Pattern != m.Pattern {
		return "", "", fmt.Errorf("policy: %w: path %q reaches no node with limits", store.ErrBadRequest, path)
	}
	h := m.Hits[len(m.Hits)-1]
	return h.Pattern, h.Key, nil
}

// overridePrefix names an override's entry on the board.
const overridePrefix = "override\x00"

func (o Override) entry() string { return overridePrefix + o.Node + "\x00" + o.Key }

// SetOverride validates o against the policy in force, as limits.yaml's
// limits are validated (and its Until: after the store's time, within
// algo.MaxHorizon), and keeps it in the store, where every instance
// finds it at its next Refresh (this one at once). An override of the same
// node and key is replaced. The error wraps store.ErrBadRequest for an
// invalid one, and algo.ErrUnsupported for a store without a board.
func (c *Checker) SetOverride(ctx context.Context, o Override) error {
	b, ok := c.Store.(store.Board)
	if !ok {
		return fmt.Errorf("policy: %w: the store keeps no overrides", algo.ErrUnsupported)
	}
	if _, _, err := compileOverride(c.Policy.Load(), o); err != nil {
		return fmt.Errorf("policy: %w: %w", store.ErrBadRequest, err)
	}
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// Expired overrides go first, so that they do not fill the board.
	st, err := b.Read(ctx, true)
	if err != nil {
		return err
	}
	if !o.Until.IsZero() && (!o.Until.After(st.Time) || o.Until.Sub(st.Time) > algo.MaxHorizon) {
		return fmt.Errorf("policy: %w: override: until %s: want after the store's time, %s, and at most %v later",
			store.ErrBadRequest, o.Until.Format(time.RFC3339Nano), st.Time.Format(time.RFC3339Nano), algo.MaxHorizon)
	}
	for _, x := range decodeOverrides(st.Entries) {
		if !x.Until.IsZero() && !x.Until.After(st.Time) {
			if err := b.Post(ctx, x.entry(), nil); err != nil {
				return err
			}
		}
	}
	if err := b.Post(ctx, o.entry(), data); err != nil {
		return err
	}
	return c.Refresh(ctx)
}

// RemoveOverride removes the override of node and key; the node's limits
// apply again, at every instance's next Refresh.
func (c *Checker) RemoveOverride(ctx context.Context, node, key string) error {
	b, ok := c.Store.(store.Board)
	if !ok {
		return fmt.Errorf("policy: %w: the store keeps no overrides", algo.ErrUnsupported)
	}
	if err := b.Post(ctx, Override{Node: node, Key: key}.entry(), nil); err != nil {
		return err
	}
	return c.Refresh(ctx)
}

// Overrides returns the overrides the store keeps, by node and key,
// expired ones included until the next SetOverride removes them.
func (c *Checker) Overrides(ctx context.Context) ([]Override, error) {
	b, ok := c.Store.(store.Board)
	if !ok {
		return nil, nil
	}
	st, err := b.Read(ctx, true)
	if err != nil {
		return nil, err
	}
	return decodeOverrides(st.Entries), nil
}

// Refresh reads the store's overrides when they changed since the last
// Refresh (one round trip for the board's generation when they have not),
// and applies them from then on. The service calls it every 250ms; a
// library user calls it, or lives with the overrides of the last call.
func (c *Checker) Refresh(ctx context.Context) error {
	b, ok := c.Store.(store.Board)
	if !ok {
		return nil
	}
	st, err := b.Read(ctx, false)
	if err != nil {
		return err
	}
	if cur := c.overrides.Load(); cur != nil && cur.gen == st.Gen {
		return nil
	}
	if st, err = b.Read(ctx, true); err != nil {
		return err
	}
	set := &overrideSet{gen: st.Gen, offset: time.Until(st.Time), list: decodeOverrides(st.Entries)}
	set.build(c.Policy.Load())
	c.overrides.Store(set)
	if dc, ok := c.Store.(store.DenialCache); ok {
		dc.ClearOverLimit() // denials by limits that may have changed
	}
	return nil
}

func decodeOverrides(entries map[string][]byte) []Override {
	var out []Override
	for name, data := range entries {
		var o Override
		if strings.HasPrefix(name, overridePrefix) && json.Unmarshal(data, &o) == nil {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Override) int { return strings.Compare(a.entry(), b.entry()) })
	return out
}

// overrideSet is the overrides in force, compiled for one policy.
type overrideSet struct {
	gen    int64
	offset time.Duration // the store's clock less this machine's, at the read
	list   []Override

	mu       sync.Mutex                   // held to compile for another policy
	compiled atomic.Pointer[overridesFor] // for the policy it names
}

// overridesFor is an overrideSet's overrides compiled for one policy, by
// node index (Hit.node), so that a lookup hashes the key alone.
type overridesFor struct {
	policy *Policy
	nodes  []nodeOverrides
}

// nodeOverrides are the overrides of one node: by exact key, and its globs
// in the set's order.
type nodeOverrides struct {
	exact map[string]*compiledOverride
	globs []*compiledOverride
}

type compiledOverride struct {
	glob   string // the key's glob, for one of globs
	prefix string // the glob's literal part when it is that and a final * (the common "trial-*")
	limits []algo.Limit
	plans  []plan
	noDebt []algo.Plan // see node.noDebt
	until  int64       // µs; 0: never
}

// build compiles the set's overrides for p; one that no longer fits p (a
// node gone) is left out. Overrides of a node with the same limits share
// one compiled copy of them: a thousand customers on a few tiers keep a
// few plans, warm in the cache.
func (s *overrideSet) build(p *Policy) *overridesFor {
	c := &overridesFor{policy: p, nodes: make([]nodeOverrides, len(p.nodes))}
	shared := map[string]*compiledOverride{} // node and limits -> the first compiled
	for _, o := range s.list {
		i, co, err := compileOverride(p, o)
		if err != nil {
			continue
		}
		sig := fmt.Sprintf("%d %v", i, co.limits)
		if first, ok := shared[sig]; ok {
			co.limits, co.plans, co.noDebt = first.limits, first.plans, first.noDebt
		} else {
			shared[sig] = co
		}
		n := &c.nodes[i]
		if strings.ContainsAny(o.Key, "*?[") {
			co.glob = o.Key
			if lit, ok := strings.CutSuffix(o.Key, "*"); ok && !strings.ContainsAny(lit, "*?[\\") {
				co.prefix = lit
			}
			n.globs = append(n.globs, co)
		} else {
			if n.exact == nil {
				n.exact = map[string]*compiledOverride{}
			}
			n.exact[o.Key] = co
		}
	}
	s.compiled.Store(c)
	return c
}

// apply replaces the limits of the hits an override in force at t covers.
func (s *overrideSet) apply(p *Policy, hits []Hit, t time.Time) {
	if len(s.list) == 0 {
		return
	}
	c := s.compiled.Load()
	if c == nil || c.policy != p { // a reload since: compile again for it
		s.mu.Lock()
		if c = s.compiled.Load(); c == nil || c.policy != p {
			c = s.build(p)
		}
		s.mu.Unlock()
	}
	for i := range hits {
		h := &hits[i]
		n := &c.nodes[h.node]
		co := n.exact[h.Key]
		if co == nil {
			for _, g := range n.globs {
				if g.prefix != "" {
					if strings.HasPrefix(h.Key, g.prefix) && !strings.Contains(h.Key[len(g.prefix):], "/") {
						co = g
						break
					}
					continue
				}
				if ok, _ := path.Match(g.glob, h.Key); ok {
					co = g
					break
				}
			}
		}
		if co == nil {
			continue
		}
		if co.until != 0 {
			if t.IsZero() {
				t = time.Now().Add(s.offset)
			}
			if t.UnixMicro() >= co.until {
				continue
			}
		}
		h.Limits, h.plans, h.noDebt = co.limits, co.plans, co.noDebt
	}
}

// compileOverride checks o against p and compiles its limits.
// It returns the node's index in p.nodes.
func compileOverride(p *Policy, o Override) (int, *compiledOverride, error) {
	var n *Node
	idx := -1
	for i := range p.nodes {
		if p.nodes[i].Pattern == o.Node {
			n, idx = &p.nodes[i], i
		}
	}
	switch {
	case n == nil:
		return 0, nil, fmt.Errorf("override: no node %q in the policy", o.Node)
	case len(n.Specs) == 0:
		return 0, nil, fmt.Errorf("override: node %q has no limits to override", o.Node)
	case n.Delay > 0:
		return 0, nil, fmt.Errorf("override: node %q delays: its limits reserve ahead, which an override's would not", o.Node)
	case o.Key == "":
		return 0, nil, errors.New("override: a key, or a glob of keys, is needed")
	case (len(o.Limits) > 0) == (o.Factor != 0):
		return 0, nil, errors.New("override: give limits or a factor, one of them")
	case o.Factor != 0 && (o.Factor <= 0 || o.Factor > maxFactor || math.IsNaN(o.Factor)):
		return 0, nil, fmt.Errorf("override: factor %v: want above 0 and at most %g", o.Factor, maxFactor)
	case len(o.Limits) > maxOverrideLimits:
		return 0, nil, fmt.Errorf("override: %d limits, more than %d", len(o.Limits), maxOverrideLimits)
	}
	if _, err := path.Match(o.Key, ""); err != nil {
		return 0, nil, fmt.Errorf("override: key %q: %v", o.Key, err)
	}
	specs := o.Limits
	if o.Factor != 0 {
		specs = make([]algo.Spec, len(n.Specs))
		for i, s := range n.Specs {
			specs[i] = scaled(s, o.Factor)
		}
	}
	co := &compiledOverride{limits: make([]algo.Limit, len(specs)), plans: make([]plan, len(specs))}
	for i, s := range specs {
		l, err := s.Build()
		if err == nil {
			co.plans[i].Plan, err = algo.Compile(l)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("override: limits[%d]: %s", i, strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": "))
		}
		co.limits[i] = l
	}
	co.noDebt = withoutDebt(co.plans)
	makeForms(nil, co.limits, co.plans)
	if !o.Until.IsZero() {
		co.until = o.Until.UnixMicro()
	}
	return idx, co, nil
}

// scaled is s with its counts times f (at least 1; a gcra's burst+1 and
// count; a token bucket's burst and rate).
func scaled(s algo.Spec, f float64) algo.Spec {
	mul := func(n int64) int64 { return max(int64(math.Round(float64(n)*f)), 1) }
	switch s.Algorithm {
	case "gcra":
		s.Burst, s.Count = mul(s.Burst+1)-1, mul(s.Count)
	case "token_bucket":
		s.Burst, s.Rate = mul(s.Burst), mul(s.Rate)
	case "fixed_window", "concurrency":
		s.Limit = mul(s.Limit)
	case "sliding_log", "window_counter":
		ws := slices.Clone(s.Limits)
		for i := range ws {
			ws[i].Limit = mul(ws[i].Limit)
		}
		s.Limits = ws
	}
	return s
}
