package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	pathpkg "path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

func runExplain(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "explain", `usage: sluice explain [--prefix P] [--store URL] FILE SEGMENT...

Shows what a request for the path SEGMENT... hits in the limits.yaml FILE:
for each level, from the root down, the node's pattern, the state key of
each limit, its Redis key and Redis Cluster hash slot, whether the level is
shadow, and the limit. It says when the path is unmatched, reaches an
unlimited node or meets an allow or deny list (and which entry), and which
trailing segments the walk ignored. With --store, it also shows the
overrides kept there that apply to the path's keys. With no segments it
lists the policy's nodes.

  sluice explain limits.yaml user alex trade

flags:`)
	prefix := fs.String("prefix", redis.DefaultPrefix, "the Redis store's key prefix")
	storeURL := fs.String("store", "", "the running service's store (redis://...): also show the overrides in force for the path's keys")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if strings.ContainsAny(*prefix, "{}") {
		fmt.Fprintf(e.stderr, "explain: prefix %q may not contain '{' or '}'\n", *prefix)
		return 2
	}
	file, path := fs.Arg(0), fs.Args()[1:]
	p, err := policy.Load(file)
	if err != nil {
		var list yamlfile.ErrorList
		if errors.As(err, &list) {
			for _, pe := range list {
				fmt.Fprintln(e.stderr, pe)
			}
		} else {
			fmt.Fprintf(e.stderr, "explain: %v\n", err)
		}
		return 1
	}
	if len(path) == 0 {
		listNodes(e.stdout, p)
		return 0
	}
	explain(e.stdout, p, path, *prefix)
	if *storeURL != "" {
		st, err := server.OpenStore(ctx, server.Config{Store: *storeURL}.Defaults())
		if err != nil {
			fmt.Fprintf(e.stderr, "explain: %v\n", err)
			return 1
		}
		defer st.Close()
		c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
		list, err := c.Overrides(ctx)
		if err != nil {
			fmt.Fprintf(e.stderr, "explain: %v\n", err)
			return 1
		}
		explainOverrides(e.stdout, p.Match(path), list)
	}
	return 0
}

// explainOverrides says which of the overrides apply to the hits' keys.
func explainOverrides(w io.Writer, m policy.Match, list []policy.Override) {
	found := false
	for _, h := range m.Hits {
		for _, o := range list {
			if ok, _ := pathpkg.Match(o.Key, h.Key); o.Node != h.Pattern || !ok {
				continue
			}
			found = true
			what := fmt.Sprintf("its limits times %g", o.Factor)
			if len(o.Limits) > 0 {
				specs := make([]string, len(o.Limits))
				for i, s := range o.Limits {
					specs[i] = specJSON(s)
				}
				what = strings.Join(specs, ", ")
			}
			until := "until removed"
			if !o.Until.IsZero() {
				until = "until " + o.Until.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "override at %s for %s (%s): %s, %s\n", h.Pattern, h.Key, o.Key, what, until)
		}
	}
	if !found {
		fmt.Fprintln(w, "overrides: none applies to these keys")
	}
}

// explain prints the levels a path hits.
func explain(w io.Writer, p *policy.Policy, path []string, prefix string) {
	m := p.Match(path)
	fmt.Fprintf(w, "path: %s\n", showPath(path))
	if len(m.Hits) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "LEVEL\tPATTERN\tKEY\tREDIS KEY\tSLOT\tSHADOW\tLIMIT")
		for i, lv := range m.Hits {
			for j, l := range lv.Limits {
				level, pattern, shadow := strconv.Itoa(i+1), lv.Pattern, "no"
				if lv.Shadow {
					shadow = "yes"
				}
				if j > 0 {
					level, pattern, shadow = "", "", ""
				}
				key := lv.LimitKey(j)
				name := redis.StateKey(prefix, lv.Request(j, 0))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", level, pattern, quoteIfUnclear(key), quoteIfUnclear(name), redis.HashSlot(name), shadow, specJSON(l.Spec()))
			}
		}
		tw.Flush()
		for i, h := range m.Hits {
			for j := range h.Limits {
				if k := h.LimitKey(j); len(k) > store.MaxKeyLen {
					fmt.Fprintf(w, "key too long: level %d's key is %d bytes, more than a store takes (%d): a check of this path is refused as a bad request (400)\n", i+1, len(k), store.MaxKeyLen)
					break
				}
			}
		}
		for i, h := range m.Hits {
			for _, l := range h.Limits {
				if b, ok := l.(algo.Blocking); ok {
					l = b.Limit
				}
				if s := means(l.Spec()); s != "" {
					fmt.Fprintf(w, "level %d, %s: %s\n", i+1, h.Pattern, s)
				}
			}
		}
		for _, h := range m.Hits {
			if h.Delay > 0 {
				fmt.Fprintf(w, "delay at %s: a request its limits would admit within %v is admitted, held until its time\n", h.Pattern, h.Delay)
			}
			for _, l := range h.Limits {
				if b, ok := l.(algo.Blocking); ok {
					bl := b.Block.WithDefaults()
					fmt.Fprintf(w, "block at %s: a key that goes over is denied for %v; each further block within %v of the last one's end is %gx longer, up to %v\n", h.Pattern, bl.For, bl.ForgetAfter, bl.Growth, bl.Max)
					l = b.Limit
				}
				if _, ok := l.(algo.Debt); ok {
					fmt.Fprintf(w, "debt at %s: a charge past the limit is recorded in full (and answered 429), so the checks after it are denied until the window's end or the refill has paid it back\n", h.Pattern)
				}
				if c, ok := l.(algo.Concurrency); ok {
					fmt.Fprintf(w, "slots at %s: at most %d held at once; a check holds its slots under a permit until POST /v1/release (or Envoy's is_negative_hits), and a holder that stops renewing loses them %v after its last renewal\n", h.Pattern, c.Count, c.HoldFor)
				}
			}
		}
	}
	switch {
	case m.Listed.List == "allow":
		fmt.Fprintf(w, "allow list of %s matched %q: the request is never limited; no level is decided\n", m.Listed.Pattern, m.Listed.Entry)
	case m.Listed.List == "deny":
		fmt.Fprintf(w, "deny list of %s matched %q: the request is always denied (403); no level is decided\n", m.Listed.Pattern, m.Listed.Entry)
	case m.Unlimited:
		fmt.Fprintf(w, "unlimited at %s: nothing from there down limits the request\n", m.Pattern)
	case m.Unmatched:
		how := "allows it (unmatched: allow)"
		if p.DenyUnmatched() {
			how = "denies it (unmatched: deny)"
		}
		why := "no level with limits on the path"
		if len(m.Hits) > 0 {
			why = "every level on the path is shadow"
		}
		fmt.Fprintf(w, "unmatched: %s; the policy %s\n", why, how)
	}
	if m.Depth < len(path) {
		where := "at the root"
		if m.Pattern != "" {
			where = "below " + m.Pattern
		}
		if !m.Unlimited {
			fmt.Fprintf(w, "ignored: %s (no child matches %s)\n", showPath(path[m.Depth:]), where)
		}
	}
}

// listNodes prints every node of the policy.
func listNodes(w io.Writer, p *policy.Policy) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATTERN\tSHADOW\tLIMIT\tMEANS")
	for _, n := range p.Nodes() {
		shadow := "no"
		if n.Shadow {
			shadow = "yes"
		}
		switch {
		case n.Unlimited:
			fmt.Fprintf(tw, "%s\t%s\tunlimited\n", n.Pattern, shadow)
		case len(n.Specs) == 0:
			fmt.Fprintf(tw, "%s\t%s\t-\n", n.Pattern, shadow)
		}
		for i, s := range n.Specs {
			pattern := n.Pattern
			if i > 0 {
				pattern, shadow = "", ""
			}
			m := s
			m.Block = nil
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", pattern, shadow, specJSON(s), means(m))
		}
	}
	tw.Flush()
}

// showPath joins segments with " / ", quoting those that would be unclear.
func showPath(path []string) string {
	parts := make([]string, len(path))
	for i, s := range path {
		parts[i] = quoteIfUnclear(s)
		if strings.Contains(s, "/") && parts[i] == s {
			parts[i] = strconv.Quote(s)
		}
	}
	return strings.Join(parts, " / ")
}

// quoteIfUnclear quotes s if it is empty or holds spaces, quotes or
// characters that do not print.
func quoteIfUnclear(s string) string {
	if q := strconv.Quote(s); s == "" || strings.ContainsAny(s, " \"") || q != `"`+s+`"` {
		return q
	}
	return s
}

// specJSON renders a limit as in replay events.
func specJSON(s any) string {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Sprint(s)
	}
	return string(b)
}
