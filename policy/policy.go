// Package policy loads limits.yaml, a tree of rate limits over request
// paths, and matches paths against it.
//
// A policy file looks like this:
//
//	unmatched: allow            # or deny; allow when left out
//	schema:
//	  user:
//	    children:
//	      "*":                  # any user id not matched by name
//	        limits: [15, 30, 60]    # GCRA: burst 15, 30 per 60 s
//	        children:
//	          trade:
//	            limits:
//	              - {algorithm: fixed_window, limit: 1000, window: 1h}
//	              - {algorithm: gcra, burst: 5, count: 10, period: 1s}
//	      admin:
//	        unlimited: true
//	  tigerfeeding:
//	    limits: [{algorithm: fixed_window, limit: 100, window: 10s}]
//	    children:
//	      "*":
//	        shadow: true
//	        limits: {algorithm: gate, interval: 10s}
//
// Each node of the tree may have these fields:
//
//   - limits: a list of limits, each either a mapping of algo.Spec fields
//     ({algorithm: gcra, burst: 5, count: 10, period: 1s}) or the shorthand
//     [burst, count, period] of a GCRA limit (CL.THROTTLE's max_burst,
//     count and period: it admits burst+1 at once), whose period is in
//     seconds or a duration string. A list of three numbers is one
//     shorthand limit, and a single mapping is one limit. A gcra or
//     token_bucket mapping may give its rate plainly, as rate: 30/1m.
//   - children: the nodes below, by path segment. A segment takes the
//     child of its name; else the first child (in file order) whose name is
//     a pattern with "*", each "*" matching any run of bytes ("v*",
//     "/api/*/action"); else the child "*", which matches any segment.
//     Each segment a pattern or "*" matches has its own state.
//   - shared_counter: true, on a child whose name is a pattern: every
//     segment it matches shares one state (its key names the pattern).
//   - name and replaces: a name for the node, and the names of the nodes
//     it replaces: when several paths are decided together
//     (Checker.Decide, as the service's gRPC API decides the descriptors
//     of one request), the limits of a node another hit replaces are not
//     checked, as envoyproxy/ratelimit's replaces.
//   - unlimited: true: a request whose walk reaches the node is not limited
//     by it or by anything below it (it may have neither limits nor
//     children); the levels above it still apply.
//   - shadow: true: the limits of the node and of every node below it are
//     checked and reported but not enforced, for rolling out new limits
//     (for a path decided Exact, as Envoy matches, the node's own only).
//   - quota_mode: true: shadow: true, and the service's Envoy answer
//     reports the node's denial as envoyproxy/ratelimit reports a
//     quota_mode descriptor's: OK, with nothing left and no reset.
//   - lease: true, on a node whose limits are all fixed_window: a store
//     with leased quota (the Redis store's LeaseFor, the service's
//     redis.lease_for) may admit the node's requests from units it took
//     ahead for a hot key, without a round trip each; the window still
//     never admits more than its limit (see store/redis). It also lets the
//     service grant quota to an Envoy proxy that asks for it.
//   - global: true, on a node whose limits are all fixed_window (of a
//     duration, with no block or debt): its limits are one limit across
//     regions, each region on its own store, charged at a home store
//     (the Redis store's Options.Home, the service's redis.home); see
//     docs/multi-region.md.
//   - delay: {max: D}, on a node whose limits are gcra or token_bucket: a
//     request the limits would deny but would admit within D (at most a
//     minute) is admitted with its units reserved, and waits its Delay
//     (docs/policy.md).
//   - request_limit: {max: N, window: W}: a request's own limit (the
//     service's "limit", a gRPC descriptor's limit) is honoured up to N
//     per W; without it a request's limit is ignored.
//   - debt: true: a charge is recorded in full even past the limits, and
//     the checks after it are denied until the debt is paid back (every
//     limit gets algo.Debt; docs/usage-budgets.md).
//   - escalate: {blocks: N, within: W, block: {for: D, ...}}, on a node
//     with children: each block that starts on a level below it on a
//     request's path (or, with denials: N, each denial there) counts one
//     on the node's key, in fixed windows of W, and the Nth starts the
//     block on it, in the same atomic decision; while blocked, every
//     request through the node is denied (docs/recipes.md, logins).
//   - allow and deny, on a "*" or pattern child: lists of the segments
//     reaching it (keys, IP addresses, CIDR ranges; at most
//     10,000 each) that are never limited (the path decides
//     nothing, ancestors included) or always denied (the whole decision
//     is denied and counts nothing). Allow wins over deny; Match.Listed
//     and Decision.Listed name the entry (lists.go).
//
// At the top level, schema: holds the tree; unmatched: deny denies the
// requests that no policy matches (see Match.Unmatched); counts: says how
// a decision counts the levels it hits: all_or_nothing (the default) on
// every level or none, only when every enforced level admits it, so that
// a denied request costs nothing; each, every level its own charge,
// admitted or denied, as envoyproxy/ratelimit counts descriptors (each
// limit gets algo.Debt; a peek is denied only past its limit; a key hit
// twice is counted twice, in order), which import-envoy writes; or
// stop_when_over, each but that when a level (a shadow one too) would go
// over, only the levels that go over count
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). definitions:, a
// place for YAML anchors, is ignored. Anchors, aliases and merge keys (<<)
// work; YAML tags and more than one document are errors.
//
// Parse and Load report every problem in a file, not just the first, each
// with its file:line:col and field path (an yamlfile.ErrorList): unknown fields,
// wrong types, invalid limits (as algo.Spec.Build judges them: a negative
// burst, a zero count or period, a field the algorithm does not take),
// duplicate children and fields, an empty tree or node, a shorthand of the
// wrong length, an unlimited node with limits or children.
//
// Policy.Match walks a request path from the root, one segment per level,
// taking the named child if there is one and else "*", and stops at the
// first segment that has no matching child: deeper segments are ignored.
// Every node on the walk that has limits is a Level that the request is
// checked against.
//
// Keys are built with sluice.Key, so a segment such as "alex:trade" or
// "{alex}" can never produce another path's key. The caller-specific part
// of a path shares one Redis Cluster hash tag: from the first segment
// matched where a "*" child exists (matched by "*" or by a named child that
// overrides it), every level's Tag is the key of that segment, such as
// "user:alex" for "user:alex" and "user:alex:trade". Levels above it, shared
// by all callers, are their own tags.
//
// A compiled Policy is immutable and safe for concurrent use; a Holder swaps
// one for another atomically on reload.
package policy

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/store"
)

// wildcard is the child name that matches any path segment that no named
// child matches.
const wildcard = "*"

// counting is how a decision counts the levels it hits (the file's
// counts).
type counting uint8

const (
	// allOrNothing: a request counts on every level or on none, only when
	// every enforced level admits it (a level with debt: true records its
	// charge whatever the others decide).
	allOrNothing counting = iota
	// each: every level counts its charge whatever the others decide,
	// admitted or denied (each limit gets algo.Debt), in the order of the
	// paths, as envoyproxy/ratelimit counts descriptors; a peek counts
	// nothing and is denied only past the limit.
	each
	// stopWhenOver: each, but when a level (shadow ones too) would go over
	// its limit, only the levels that go over count
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	stopWhenOver
)

// countings are the counts a file may say, by counting.
var countings = [...]string{"all_or_nothing", "each", "stop_when_over"}

// Policy is a compiled, immutable limits tree.
type Policy struct {
	name          string
	root          *node
	denyUnmatched bool
	counts        counting
	nodes         []Node
}

// node is one compiled node of the tree.
type node struct {
	pattern string
	limits  []algo.Limit // shared by every Hit of the node: read-only
	specs   []algo.Spec  // the limits as written
	plans   []plan       // the limits compiled, for the requests and the answers: read-only
	// noDebt are the plans an Estimate decides with: a limit with debt
	// without it, since a denied estimate records nothing (nil: no debt).
	noDebt    []algo.Plan
	shadow    bool // the node or an ancestor is shadow
	ownShadow bool // the node itself says shadow: true (or quota_mode: true)
	quotaMode bool // the node itself says quota_mode: true (see Hit.QuotaMode)
	counts    counting
	unlimited bool
	children  map[string]*node // named children
	globs     []*node          // children whose names are patterns, in file order
	star      *node            // the "*" child
	// glob is the node's name when it is a pattern such as "files/*";
	// sharedCounter makes every segment it matches count as one.
	glob          string
	sharedCounter bool
	// name and replaces: see Hit.Name and Hit.Replaces.
	name     string
	replaces []string
	lease    bool // see Hit.Lease
	global   bool // see Hit.Global
	// allow and deny are the node's lists (lists.go); nil when it has none.
	allow, deny *keyList
	// listsAddrs: the lists hold an address or a range, so a segment here
	// that reads as an address is one (see addrSegment).
	listsAddrs bool
	// delay is the node's delay: its plans are then the reserving ones
	// (see Hit.Delay).
	delay time.Duration
	// requestMax bounds a per-request limit (PathQuery.Limit) on the node:
	// at most Count per Window; nil when the node takes none.
	requestMax *algo.FixedWindow
	// index is the node's place in Policy.nodes (and Hit.node).
	index int
	// escalate is the node's escalate; nil when it has none.
	escalate *escalation
}

// An escalation is a node's escalate: the blocks (or, with denials, the
// denials) of the levels below it on a path, counted in a fixed window
// whose limit is one less than the count that blocks the node's key.
type escalation struct {
	limit   algo.Blocking // a FixedWindow and its block
	plan    plan
	denials bool
}

// escalateKey is the state key of a hit's escalation: the hit's key and
// "#escalate" (a limit's is the key or key#j).
func escalateKey(key string) string { return key + "#escalate" }

// maxDelay bounds a node's delay: a request waits at most this long.
const maxDelay = time.Minute

// child returns the child a segment reaches: the named one, else the
// first pattern (in file order) that matches it, else "*".
func (n *node) child(seg string) *node {
	if c := n.children[seg]; c != nil {
		return c
	}
	for _, g := range n.globs {
		if globMatch(g.glob, seg) {
			return g
		}
	}
	return n.star
}

// variable reports whether the segment below n names a caller (or any
// value): n has a "*" or a pattern child.
func (n *node) variable() bool { return n.star != nil || len(n.globs) > 0 }

// globMatch reports whether s matches pattern, in which each "*" matches
// any run of bytes, the empty one included.
func globMatch(pattern, s string) bool {
	// The classic greedy match with one backtrack point: the last star.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// compiled is one limit of a node as the loader builds it.
type compiled struct {
	spec  algo.Spec
	limit algo.Limit
	plan  algo.Plan // limit, compiled
}

// Node describes one node of a policy, as listed by Policy.Nodes.
type Node struct {
	// Pattern is the node's path of child names from the root, joined by
	// '/', such as "user/*/trade".
	Pattern string
	// Specs are the node's limits.
	Specs []algo.Spec
	// Shadow reports whether the node's limits are not enforced (it or an
	// ancestor is shadow).
	Shadow bool
	// Unlimited reports whether the node is unlimited.
	Unlimited bool
	// Lease reports whether the node's limits may be leased.
	Lease bool
	// Global reports whether the node's limits are global (Hit.Global).
	Global bool
	// Delay is the node's delay (0: none): see Hit.Delay.
	Delay time.Duration
}

// Match is what a request path hits in a policy.
type Match struct {
	// Hits are the nodes with limits on the walk, from the root down.
	Hits []Hit
	// Pattern is the pattern of the deepest node the walk reached, "" when
	// the first segment matched nothing. It has few distinct values, which
	// suits it to metrics labels.
	Pattern string
	// Depth is how many leading segments of the path the walk matched;
	// the segments after them were ignored.
	Depth int
	// Unlimited reports whether the walk reached an unlimited node, which
	// ended it.
	Unlimited bool
	// Unmatched reports whether the path matched no policy: no hit is
	// enforced (there are none, or they are all shadow) and the walk
	// reached no unlimited node. An unmatched request is allowed unless
	// Policy.DenyUnmatched; its shadow hits, if any, are still reported.
	Unmatched bool
	// Listed is the allow or deny list entry that a segment of the path
	// matched (allow wins): then Hits is empty, the path is not
	// Unmatched, and it is allowed without a decision (allow) or denied
	// (deny).
	Listed Listed
	// said is what a decision's Listed says of Listed (listEntry).
	said string
	// Err, when not nil, refuses the path: a segment at a node whose lists
	// hold addresses reads as an IP address, but not in its one spelling
	// (a port, leading zeros, the integer form). It wraps
	// store.ErrBadRequest, and the walk stopped there.
	Err error
}

// Hit is one node with limits that a request's walk hits.
type Hit struct {
	// Pattern is the node's pattern, such as "user/*/trade".
	Pattern string
	// Key is the request's key at this node: sluice.Key of the path's
	// segments down to the node, such as "user:alex:trade".
	Key string
	// Tag is the Redis Cluster hash tag of the node's keys, a prefix of
	// Key (see the package documentation).
	Tag string
	// Shadow reports whether the node's denials are reported but not
	// enforced.
	Shadow bool
	// QuotaMode reports whether the node says quota_mode: true: it is
	// shadow, and an Envoy answer reports its denial as envoyproxy/ratelimit
	// reports a quota_mode descriptor's (OK, nothing left, no reset).
	QuotaMode bool
	// Name is the node's name (its name field), and Replaces the names of
	// the nodes it replaces: when several paths are decided together
	// (policy.Checker.Decide), a hit on a node whose name another hit
	// replaces is dropped, as envoyproxy/ratelimit's replaces does.
	Name     string
	Replaces []string
	// Shared reports whether every caller shares the node's state: no
	// segment of its key was matched where a "*" child exists (such as
	// tigerfeeding above its "*"), so its Tag is its own Key.
	Shared bool
	// Limits are the node's limits, in the order of the file. The slice is
	// the policy's own: do not modify it.
	Limits []algo.Limit
	// Lease reports whether the node says lease: true: its requests may be
	// admitted from leased quota (store.Request.Lease).
	Lease bool
	// Global reports whether the node says global: true: its limits are one
	// limit across regions (store.Request.Global).
	Global bool
	// Delay is the node's delay (delay: {max: ...}): its requests carry
	// plans that admit a cost its limits would admit within Delay,
	// reserved (algo.Reserving), and the decision's Delay says how
	// long to wait.
	Delay time.Duration
	// plans are Limits compiled when the policy loaded: the requests carry
	// them, and the levels show their forms; noDebt, the plans an
	// Estimate's requests carry (node.noDebt).
	plans  []plan
	noDebt []algo.Plan
	// requestMax is the node's bound of a per-request limit (nil: none).
	requestMax *algo.FixedWindow
	// counts is the policy's counts.
	counts counting
	// node is the node's index in its policy's nodes.
	node int
	// escalate is the node's escalate (nil: none), decided after the
	// hit's limits as a request that watches the levels below it.
	escalate *escalation
}

// Request returns the request that decides the hit's limit j at cost:
// its key (LimitKey), the hit's tag, shadow, lease and global, and the limit's
// plan, compiled when the policy loaded. Its Time is the zero Time.
func (h *Hit) Request(j int, cost int64) store.Request {
	return store.Request{Key: h.LimitKey(j), Tag: h.Tag, Plan: &h.plans[j].Plan, Cost: cost, Shadow: h.Shadow, Lease: h.Lease, Global: h.Global, Stop: h.counts == stopWhenOver}
}

// hit returns the Hit of node n; with exact, the node's shadow is its own
// (Envoy's shadow_mode covers one descriptor), else inherited.
func (n *node) hit(key, tag string, shared, exact bool) Hit {
	shadow := n.shadow
	if exact {
		shadow = n.ownShadow
	}
	return Hit{Pattern: n.pattern, Key: key, Tag: tag, Shadow: shadow, QuotaMode: n.quotaMode, Shared: shared, Name: n.name, Replaces: n.replaces, Limits: n.limits, Lease: n.lease, Global: n.global, Delay: n.delay, plans: n.plans, noDebt: n.noDebt, requestMax: n.requestMax, node: n.index, escalate: n.escalate, counts: n.counts}
}

// LimitKey returns the state key of the hit's limit j: Key when the node
// has one limit, else Key + "#" + j (sluice.Key escapes '#' in segments,
// so this cannot collide).
func (h *Hit) LimitKey(j int) string {
	if len(h.Limits) == 1 {
		return h.Key
	}
	return h.Key + "#" + strconv.Itoa(j)
}

// Load reads and compiles the policy file at path. An invalid file returns
// an yamlfile.ErrorList.
func Load(path string) (*Policy, error) {
	data, err := yamlfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, data)
}

// Parse compiles a policy from the YAML text data; name is the file name
// that error positions carry. An invalid policy returns an yamlfile.ErrorList of
// every problem found.
func Parse(name string, data []byte) (*Policy, error) {
	p, errs := parse(name, data)
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return p, nil
}

// maxTreeWork bounds the nodes and values ParseTree compiles: the xDS
// client's 200,000 descriptors (envoyimport), 5 each.
const maxTreeWork = 1_000_000

// ParseTree compiles a policy from the YAML tree a limits.yaml's text
// parses to, built without text: the xDS client builds one from Envoy's
// RateLimitConfig resources, whose updates may hold 100,000 descriptors.
// It has no anchors; errors are positioned by its tokens, if any.
func ParseTree(name string, body ast.Node) (*Policy, error) {
	l := &loader{Loader: yamlfile.New(name), forms: map[string]*levelForm{}}
	l.MaxWork = maxTreeWork
	p, errs := l.compile(name, body)
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return p, nil
}

// DenyUnmatched reports whether the policy denies unmatched requests
// (unmatched: deny) rather than allowing them.
func (p *Policy) DenyUnmatched() bool { return p != nil && p.denyUnmatched }

// Name returns the file name the policy was parsed with.
func (p *Policy) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Nodes lists every node of the policy, parents before their children and
// children in the order of the file.
func (p *Policy) Nodes() []Node {
	if p == nil {
		return nil
	}
	return append([]Node(nil), p.nodes...)
}

// Match walks path from the root and returns the nodes it hits. A nil
// Policy matches nothing.
func (p *Policy) Match(path []string) Match {
	var m Match
	p.walk(path, &m, func(n *node, _ int, key, tag string, shared bool) {
		m.Hits = append(m.Hits, n.hit(key, tag, shared, false))
	})
	m.applyList()
	return m
}

// applyList empties the hits of a path that a list decided.
func (m *Match) applyList() {
	if m.Listed.List != "" {
		clear(m.Hits)
		m.Hits, m.Unmatched = m.Hits[:0], false
	}
}

// walk walks path from the root, calls visit for every node with limits
// on the way with the index of its segment in path, the node's key and
// tag and whether every caller shares it (see Hit.Shared), and fills m's Pattern, Depth, Unlimited and Unmatched (not its
// Hits). The keys are prefixes of one
// string holding the whole escaped path, so a walk allocates at most that
// string.
func (p *Policy) walk(path []string, m *Match, visit func(n *node, i int, key, tag string, shared bool)) {
	if p == nil {
		m.Unmatched = true
		return
	}
	var endsBuf [16]int
	full, ends := joinEscaped(path, endsBuf[:0])
	n := p.root
	tag := ""
	tagged, enforced := false, false
	var counted []string // path with the segments of shared counters replaced, once one is
	for i, seg := range path {
		c := n.child(seg)
		if c == nil {
			break
		}
		if c.listsAddrs && !c.allow.hasKey(seg) && !c.deny.hasKey(seg) {
			// One address, one spelling: keyed and listed by its canonical
			// form, or refused.
			a, ok := addrSegment(seg)
			if !ok {
				m.Err = fmt.Errorf("policy: %w: segment %d %.64q at %s is an IP address not in its one spelling (the node's lists hold addresses: write 192.0.2.1 or 2001:db8::1)", store.ErrBadRequest, i, seg, c.pattern)
				m.Unmatched = false
				return
			}
			if a != seg {
				if counted == nil {
					counted = append([]string(nil), path...)
				}
				counted[i], seg = a, a
				full, ends = joinEscaped(counted, ends[:0])
			}
		}
		if c.sharedCounter && seg != c.glob {
			// Every segment the pattern matches counts as the pattern:
			// the keys from here down name it instead.
			if counted == nil {
				counted = append([]string(nil), path...)
			}
			counted[i] = c.glob
			full, ends = joinEscaped(counted, ends[:0])
		}
		key := full[:ends[i]]
		if !tagged && n.variable() {
			tag, tagged = key, true
		}
		n = c
		m.Pattern, m.Depth = c.pattern, i+1
		if c.allow != nil || c.deny != nil {
			c.list(seg, m)
		}
		if c.unlimited {
			m.Unlimited = true
			break
		}
		if len(c.limits) == 0 && c.escalate == nil {
			continue
		}
		if tagged {
			visit(c, i, key, tag, false)
		} else {
			visit(c, i, key, key, true)
		}
		enforced = enforced || !c.shadow && len(c.limits) > 0
	}
	m.Unmatched = !enforced && !m.Unlimited
}

// joinEscaped returns sluice.Key(path...) and the end offset of each
// segment's key in it.
func joinEscaped(path []string, ends []int) (string, []int) {
	if len(path) == 1 {
		e := keys.Escape(path[0])
		return e, append(ends, len(e))
	}
	size := 0
	for _, seg := range path {
		size += len(seg) + 1
	}
	var b strings.Builder // String() does not copy
	b.Grow(size + 8)
	for i, seg := range path {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(keys.Escape(seg))
		ends = append(ends, b.Len())
	}
	return b.String(), ends
}

// Current is the policy in force, for concurrent readers, replaced
// atomically (a reload: Load the file, then Store the policy if it is
// valid). Readers that loaded the old policy keep using it, unchanged,
// until they load again. The zero Current holds nil, which matches
// nothing.
type Current struct {
	p atomic.Pointer[Policy]
}

// NewCurrent returns a Current of p.
func NewCurrent(p *Policy) *Current {
	h := new(Current)
	h.p.Store(p)
	return h
}

// Load returns the current policy.
func (h *Current) Load() *Policy { return h.p.Load() }

// Store makes p the current policy.
func (h *Current) Store(p *Policy) { h.p.Store(p) }
