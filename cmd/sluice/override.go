package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

func init() {
	commands["override"] = command{"set, list or remove a limit of one key (or a glob of keys) at runtime, on the running service's store", runOverride}
}

// runOverride is sluice override set|list|remove: overrides kept in the
// running service's store (policy.Override), which every instance applies
// within 250ms.
func runOverride(ctx context.Context, e env, args []string) int {
	usage := func(code int) int {
		fmt.Fprintln(e.stderr, `usage: sluice override set [--factor F | --limit SPEC...] [--for D] [flags] SEGMENT...
       sluice override list [flags]
       sluice override remove [flags] SEGMENT...

Sets, lists or removes an override: the limits of the node a path reaches,
for the path's key, changed at runtime. A last segment with * is a glob of
keys (key "trial-*"). --limit takes a limit as JSON, as sluice replay does
({"algorithm": "fixed_window", "limit": 1000, "window": "1h"}), once per
limit; --factor multiplies the node's own counts. The store and policy are
the running service's (--store and --policy, else SLUICE_STORE and
SLUICE_POLICY, else --config), which applies an override within 250ms.`)
		return code
	}
	if len(args) == 0 {
		return usage(2)
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		return usage(0)
	}
	verb := args[0]
	fs := flag.NewFlagSet("override "+verb, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	configFile := fs.String("config", "", "the running service's sluice.yaml: its store, Redis settings and policy")
	storeURL := fs.String("store", "", "the running service's store: redis://host:port/db (or SLUICE_STORE, or --config)")
	policyFile := fs.String("policy", "", "the running service's limits.yaml (or SLUICE_POLICY, or --config)")
	factor := fs.Float64("factor", 0, "the node's own limits, their counts times this (set)")
	var limits []algo.Spec
	fs.Func("limit", "a limit as JSON, once per limit (set)", func(s string) error {
		var spec algo.Spec
		if err := json.Unmarshal([]byte(s), &spec); err != nil {
			return err
		}
		limits = append(limits, spec)
		return nil
	})
	until := fs.Duration("for", 0, "how long it lasts (set; 0: until removed)")
	switch verb {
	case "set", "list", "remove":
	default:
		fmt.Fprintf(e.stderr, "override: unknown %q: want set, list or remove\n", verb)
		return usage(2)
	}
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "override %s: %v\n", verb, err)
		return 1
	}
	if (verb == "list") != (fs.NArg() == 0) {
		return usage(2)
	}
	if *until < 0 {
		fmt.Fprintf(e.stderr, "override %s: --for must be positive (0 or none: until removed), got %v\n", verb, *until)
		return 2
	}
	cfg, err := serviceConfig(*configFile, *storeURL, *policyFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "override %s: %v\n", verb, err)
		return 2
	}
	c, closeStore, err := serviceChecker(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer closeStore()
	var out any
	switch verb {
	case "list":
		list, err := c.Overrides(ctx)
		if err != nil {
			return fail(err)
		}
		out = map[string]any{"overrides": append([]policy.Override{}, list...)}
	default:
		node, key, err := c.Policy.Load().Target(fs.Args())
		if err != nil {
			return fail(err)
		}
		o := policy.Override{Node: node, Key: key}
		if verb == "remove" {
			if err := c.RemoveOverride(ctx, node, key); err != nil {
				return fail(err)
			}
			out = map[string]any{"removed": o}
			break
		}
		o.Limits, o.Factor = limits, *factor
		if *until > 0 {
			o.Until = time.Now().Add(*until)
		}
		if err := c.SetOverride(ctx, o); err != nil {
			return fail(fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "policy: bad request: ")))
		}
		out = map[string]any{"override": o}
	}
	b, _ := json.Marshal(out)
	fmt.Fprintln(e.stdout, string(b))
	return 0
}
