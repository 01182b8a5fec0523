package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/policy"
)

func runValidate(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: sluice validate FILE...

Checks each limits.yaml file. A valid file prints a one-line summary on
standard output; an invalid one prints every problem on standard error, one
a line as file:line:col: field: message. The exit status is 1 when any file
is invalid.`)
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	status := 0
	for _, file := range fs.Args() {
		p, err := policy.Load(file)
		if err != nil {
			status = 1
			var list policy.ErrorList
			if !errors.As(err, &list) {
				fmt.Fprintf(e.stderr, "validate: %v\n", err)
				continue
			}
			for _, pe := range list {
				fmt.Fprintln(e.stderr, pe)
			}
			fmt.Fprintf(e.stderr, "%s: %d %s\n", file, len(list), plural(len(list), "error", "errors"))
			continue
		}
		fmt.Fprintf(e.stdout, "%s: ok: %s\n", file, summarize(p))
	}
	return status
}

// summarize describes a valid policy in one line.
func summarize(p *policy.Policy) string {
	var nodes, limited, limits, shadow, unlimited int
	for _, n := range p.Nodes() {
		nodes++
		if len(n.Specs) > 0 {
			limited++
			limits += len(n.Specs)
			if n.Shadow {
				shadow++
			}
		}
		if n.Unlimited {
			unlimited++
		}
	}
	unmatched := "allowed"
	if p.DenyUnmatched() {
		unmatched = "denied"
	}
	return fmt.Sprintf("%d %s, %d with limits (%d %s, %d shadow), %d unlimited; unmatched requests are %s",
		nodes, plural(nodes, "node", "nodes"), limited, limits, plural(limits, "limit", "limits"), shadow, unlimited, unmatched)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
