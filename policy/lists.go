package policy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Allow and deny lists: a node may list the path segments that reach it
// (keys such as an API key, IP addresses, CIDR ranges) that are never
// limited (allow) or always denied (deny). A request whose path passes
// through a node whose allow list holds its segment is not limited at
// all: nothing of its path is decided or counted. One whose path meets a
// deny list is denied, and nothing of the whole decision is counted.
// When both match (on one node or on two), allow wins. Match.Listed says
// which entry decided.

// maxListEntries bounds a node's allow list and its deny list, and
// maxListKeyBytes an entry that is a key.
const (
	maxListEntries  = 10_000
	maxListKeyBytes = 1024
)

// Listed is the list entry that decided a path, if any.
type Listed struct {
	// List is "allow" or "deny" ("" when no list matched).
	List string
	// Entry is the entry as the file writes it, such as "10.0.0.0/8".
	Entry string
	// Pattern is the node whose list it is.
	Pattern string
}

// A keyList is a node's allow or deny list: segments matched exactly, and
// address ranges that a segment that is an IP address falls in.
type keyList struct {
	keys map[string]listEntry       // segment → its entry
	nets map[netip.Prefix]listEntry // masked range → its entry
	bits []int                      // the ranges' lengths, longest first
	// list and pattern are what the entries say: "allow" or "deny", and
	// the node's pattern.
	list, pattern string
}

// A listEntry is an entry of a list, as a match reports it (Match.Listed),
// and what a decision's Listed says of it, such as `allow 10.0.0.0/8 at
// login/*`: both made when the policy loads.
type listEntry struct {
	Listed
	said string
}

// match returns the entry seg matches.
func (k *keyList) match(seg string) (listEntry, bool) {
	if k == nil {
		return listEntry{}, false
	}
	if e, ok := k.keys[seg]; ok {
		return e, true
	}
	if len(k.bits) == 0 {
		return listEntry{}, false
	}
	a, err := netip.ParseAddr(seg)
	if err != nil {
		return listEntry{}, false
	}
	a = a.Unmap().WithZone("")
	for _, b := range k.bits {
		if b > a.BitLen() {
			continue
		}
		p, _ := a.Prefix(b)
		if e, ok := k.nets[p]; ok {
			return e, true
		}
	}
	return listEntry{}, false
}

// entry returns the entry of a string as written in the list.
func (k *keyList) entry(written string) listEntry {
	l := Listed{List: k.list, Entry: written, Pattern: k.pattern}
	return listEntry{Listed: l, said: l.List + " " + l.Entry + " at " + l.Pattern}
}

// hasKey reports whether seg is a key the list holds as written.
func (k *keyList) hasKey(seg string) bool {
	if k == nil {
		return false
	}
	_, ok := k.keys[seg]
	return ok
}

// hasAddrs reports whether the list has an address or a range.
func (k *keyList) hasAddrs() bool { return k != nil && len(k.bits) > 0 }

// addrSegment reads seg, the segment at a node whose lists hold
// addresses: an address is its one spelling, IPv4 dotted (an IPv4-mapped
// address is its IPv4 address) or IPv6 as RFC 5952 writes it, without a
// zone; a segment that some parser would read as an address but is not
// one in that form (leading zeros, the integer or hex form, a port,
// brackets, a zone on IPv4, surrounding spaces) is refused (ok false),
// so that no spelling of an address is a second key; any other segment
// is a key, as it is.
func addrSegment(seg string) (out string, ok bool) {
	if a, err := netip.ParseAddr(seg); err == nil {
		return a.Unmap().WithZone("").String(), true
	}
	return seg, !addrLike(seg)
}

// addrLike reports whether s reads as an IP address to a lenient parser.
func addrLike(s string) bool {
	if t := strings.TrimSpace(s); t != s {
		return t != "" && (addrLike(t) || isAddr(t))
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		if i := strings.IndexByte(inner, ']'); i >= 0 {
			return isAddr(inner[:i]) || addrLike(inner[:i])
		}
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		return isAddr(host) || addrLike(host)
	}
	if i := strings.IndexByte(s, '%'); i > 0 {
		return isAddr(s[:i]) || addrLike(s[:i])
	}
	if strings.IndexByte(s, ':') >= 0 { // IPv6-like: hex digits, colons, dots
		return strings.Trim(s, "0123456789abcdefABCDEF:.") == ""
	}
	// inet_aton's forms: one to four parts, decimal, octal or hex.
	parts := strings.Split(strings.TrimSuffix(s, "."), ".")
	if len(parts) > 4 {
		return false
	}
	for _, p := range parts {
		if h, ok := strings.CutPrefix(strings.ToLower(p), "0x"); ok {
			p = h
			if strings.Trim(p, "0123456789abcdef") != "" {
				return false
			}
			continue
		}
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// keyList reads the allow or deny list (list) of the node of pattern: a
// list of strings (one string is a list of one), each an IP address, a
// CIDR range or a key.
func (l *loader) keyList(n ast.Node, path, list, pattern string) *keyList {
	v, ok := l.Deref(n, path)
	if !ok {
		return nil
	}
	if seq, isSeq := v.(*ast.SequenceNode); isSeq && len(seq.Values) > maxListEntries {
		l.Errorf(v, path, "at most %d entries, got %d (keep long lists in a store, not a policy)", maxListEntries, len(seq.Values))
		return nil
	}
	k := &keyList{list: list, pattern: pattern}
	for i, s := range l.Strs(v, path) {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case s == "":
			l.Errorf(v, p, "an entry is never empty")
		case strings.Contains(s, "/"):
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				l.Errorf(v, p, "%q is not a CIDR range: %v", s, err)
				continue
			}
			if pfx.Addr().Is4In6() {
				pfx = netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0))
			}
			k.addNet(pfx.Masked(), s)
		default:
			if a, err := netip.ParseAddr(s); err == nil {
				a = a.Unmap().WithZone("")
				k.addNet(netip.PrefixFrom(a, a.BitLen()), s)
				continue
			}
			if len(s) > maxListKeyBytes {
				l.Errorf(v, p, "a key of %d bytes: at most %d", len(s), maxListKeyBytes)
				continue
			}
			if k.keys == nil {
				k.keys = map[string]listEntry{}
			}
			k.keys[s] = k.entry(s)
		}
	}
	if k.keys == nil && k.nets == nil {
		return nil
	}
	return k
}

func (k *keyList) addNet(p netip.Prefix, entry string) {
	if k.nets == nil {
		k.nets = map[netip.Prefix]listEntry{}
	}
	if _, dup := k.nets[p]; !dup {
		k.nets[p] = k.entry(entry)
	}
	if !slices.Contains(k.bits, p.Bits()) {
		k.bits = append(k.bits, p.Bits())
		slices.SortFunc(k.bits, func(a, b int) int { return b - a })
	}
}

// list records on m the lists of node c that seg, the segment that
// reached it, matches: allow wins over deny, and the first of each kind
// on the walk is kept.
func (c *node) list(seg string, m *Match) {
	if m.Listed.List == "allow" {
		return
	}
	if e, ok := c.allow.match(seg); ok {
		m.Listed, m.said = e.Listed, e.said
		return
	}
	if m.Listed.List == "" {
		if e, ok := c.deny.match(seg); ok {
			m.Listed, m.said = e.Listed, e.said
		}
	}
}
