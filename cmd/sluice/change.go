package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

// runChange is sluice penalty, reward, block and unblock: a change to a
// path's keys outside a request, on a store, by a policy.
func runChange(kind string) func(ctx context.Context, e env, args []string) int {
	return func(ctx context.Context, e env, args []string) int {
		fs := newFlags(e, kind, fmt.Sprintf("usage: sluice %s (--store URL --policy limits.yaml | --config sluice.yaml) [flags] SEGMENT...\n\n%s\nThe store and policy are the running service's: from the flags, else\nSLUICE_STORE and SLUICE_POLICY (and the other SLUICE_* variables), else\n--config, as sluice serve reads them.\n\nflags:", kind, changeHelp[kind]))
		configFile := fs.String("config", "", "the running service's sluice.yaml: its store, Redis settings and policy")
		storeURL := fs.String("store", "", "the running service's store: redis://host:port/db (or SLUICE_STORE, or --config)")
		policyFile := fs.String("policy", "", "the limits.yaml the path is decided by (or SLUICE_POLICY, or --config)")
		all := fs.Bool("all-levels", false, "change the levels every caller shares too, not only the path's own")
		var units int64
		var d time.Duration
		switch kind {
		case "penalty", "reward":
			fs.Int64Var(&units, "units", 1, "how many units (1 to 2^53-1)")
		case "block":
			fs.DurationVar(&d, "for", 0, "how long (1ms to 8760h; required)")
		}
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		fail := func(err error) int {
			fmt.Fprintf(e.stderr, "%s: %v\n", kind, err)
			return 1
		}
		if fs.NArg() == 0 {
			fs.Usage()
			return 2
		}
		cfg, err := serviceConfig(*configFile, *storeURL, *policyFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", kind, err)
			return 2
		}
		var ch policy.Change
		switch kind {
		case "penalty", "reward":
			if units < 1 || units > algo.MaxCount {
				return fail(fmt.Errorf("--units must be 1 to %d, got %d", algo.MaxCount, units))
			}
			ch.Op, ch.Units = algo.Penalize, units
			if kind == "reward" {
				ch.Op = algo.Reward
			}
		case "block":
			if d < algo.MinBlock || d > algo.MaxBlock {
				return fail(fmt.Errorf("--for must be %v to %v, got %v", algo.MinBlock, algo.MaxBlock, d))
			}
			ch.Block = d
		case "unblock":
			ch.Unblock = true
		}
		ch.Shared = *all
		c, closeStore, err := serviceChecker(ctx, cfg)
		if err != nil {
			return fail(err)
		}
		defer closeStore()
		keys, err := c.Change(ctx, time.Time{}, fs.Args(), ch)
		if err != nil {
			return fail(err)
		}
		out := server.ChangeJSON{Changed: keys}
		var dec policy.Decision
		if err := c.Decide(ctx, &policy.Query{Paths: []policy.PathQuery{{Path: fs.Args()}}}, &dec); err != nil {
			return fail(err)
		}
		out.State = server.AppendDecisionJSON(nil, &dec)
		b, _ := json.Marshal(out)
		fmt.Fprintln(e.stdout, string(b))
		return 0
	}
}

// serviceChecker loads the running service's policy and opens its store,
// for a command that changes its keys; closeStore closes the store.
func serviceChecker(ctx context.Context, cfg server.Config) (c *policy.Checker, closeStore func(), err error) {
	p, err := policy.Load(cfg.Policy)
	if err != nil {
		return nil, nil, err
	}
	st, err := server.OpenStore(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return &policy.Checker{Policy: policy.NewCurrent(p), Store: st}, func() { st.Close() }, nil
}

// serviceConfig returns the settings of the service a command changes:
// the config file, then the SLUICE_* variables, then the flags, as serve
// reads them. The store must be named, and shared: a change to a store of
// this process alone would reach no service.
func serviceConfig(file, storeURL, policyFile string) (server.Config, error) {
	var cfg server.Config
	if file != "" {
		if err := server.LoadConfigFile(file, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := server.ApplyEnv(&cfg, os.Getenv); err != nil {
		return cfg, err
	}
	if storeURL != "" {
		cfg.Store = storeURL
	}
	if policyFile != "" {
		cfg.Policy = policyFile
	}
	switch {
	case cfg.Store == "":
		return cfg, errors.New("which store? Give the running service's: --store redis://host:port/db, SLUICE_STORE or --config sluice.yaml")
	case cfg.Store == "memory" || strings.HasPrefix(cfg.Store, "memory:"):
		return cfg, errors.New("the memory store lives in one process: a change to it reaches no service; give the running service's Redis (--store, SLUICE_STORE or --config)")
	case cfg.Policy == "":
		return cfg, errors.New("which policy? Give the running service's: --policy limits.yaml, SLUICE_POLICY or --config sluice.yaml")
	}
	return cfg.Defaults(), nil
}

var changeHelp = map[string]string{
	"penalty": "Consumes --units more of the path's own limits (any but a gate or slots),\npast the limit if need be: a failed login that costs more.",
	"reward":  "Gives --units of the path's own limits back, never more than they consumed:\na good login that earns one back.",
	"block":   "Blocks the path's own keys whose limits have a block (block: {for: ...})\nfor --for, whatever their block was.",
	"unblock": "Ends the blocks of the path's own keys and forgets their counts.",
}

var changeSummary = map[string]string{
	"penalty": "consume units of a path's limits outside a request (a failed login)",
	"reward":  "give units of a path's limits back outside a request (a good login)",
	"block":   "block a path's keys for a time (limits with a block)",
	"unblock": "end the blocks of a path's keys",
}

func init() {
	for kind := range changeHelp {
		commands[kind] = command{changeSummary[kind], runChange(kind)}
	}
}
