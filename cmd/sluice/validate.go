package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

func runValidate(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: sluice validate [--against paths.txt] FILE...
       sluice validate --config sluice.yaml [FILE...]

Checks each limits.yaml file. A valid file prints a one-line summary on
standard output; an invalid one prints every problem on standard error, one
a line as file:line:col: field: message. The exit status is 1 when any file
is invalid.

--against paths.txt also matches the paths you expect traffic on, one a
line (segments joined by "/", or a JSON array of strings; # comments), and
prints each that matches no limit: under unmatched: allow (the default)
such a path is not limited at all, which a typo makes easy. The exit
status is then 1 when any path matches nothing too.

--config sluice.yaml checks the service's config: every problem with its
position, and whether its forward_auth routes let a request through that
no route decides (a path no route matches, a key a route lacks under
missing: next), which would be allowed and counted nowhere. That is an
error (status 1) unless forward_auth says unmatched: allow (or deny).`)
	}
	against := fs.String("against", "", "a file of paths, one a line, that should each match a limit")
	config := fs.String("config", "", "a service config (sluice.yaml) to check, its forward_auth routes among it")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 && *config == "" {
		fs.Usage()
		return 2
	}
	status := 0
	if *config != "" {
		status = validateConfig(e, *config)
	}
	for _, file := range fs.Args() {
		p, err := policy.Load(file)
		if err != nil {
			status = 1
			var list yamlfile.ErrorList
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
		if *against != "" {
			n, err := checkAgainst(e, p, file, *against)
			if err != nil {
				fmt.Fprintf(e.stderr, "validate: %v\n", err)
				return 2
			}
			if n > 0 {
				status = 1
			}
		}
	}
	return status
}

// validateConfig checks a service config, and reports the requests its
// forward_auth routes let through undecided; it returns the exit status.
func validateConfig(e env, file string) int {
	var c server.Config
	if err := server.LoadConfigFile(file, &c); err != nil {
		var list yamlfile.ErrorList
		if !errors.As(err, &list) {
			fmt.Fprintf(e.stderr, "validate: %v\n", err)
			return 1
		}
		for _, pe := range list {
			fmt.Fprintln(e.stderr, pe)
		}
		fmt.Fprintf(e.stderr, "%s: %d %s\n", file, len(list), plural(len(list), "error", "errors"))
		return 1
	}
	fa := c.ForwardAuth
	u := fa.Uncaught()
	switch {
	case u != "" && fa.Unmatched == "":
		fmt.Fprintf(e.stderr, "%s: forward_auth: %s is allowed and counted nowhere: add a last route that catches it (match: / with no methods), or say unmatched: allow (or deny)\n", file, u)
		return 1
	case u != "":
		fmt.Fprintf(e.stdout, "%s: ok: %d %s; %s is allowed, counted nowhere (unmatched: allow)\n", file, len(fa.Routes), plural(len(fa.Routes), "route", "routes"), u)
	case len(fa.Routes) == 0:
		fmt.Fprintf(e.stdout, "%s: ok: no forward_auth routes\n", file)
	default:
		fmt.Fprintf(e.stdout, "%s: ok: %d %s; every request is decided by a route%s\n", file, len(fa.Routes), plural(len(fa.Routes), "route", "routes"), map[bool]string{true: " or refused (unmatched: deny)"}[fa.Unmatched == "deny"])
	}
	return 0
}

// maxPathsLine bounds a line of a --against file.
const maxPathsLine = 64 << 10

// checkAgainst prints the paths of the file against that match no limit
// of p, and returns how many.
func checkAgainst(e env, p *policy.Policy, file, against string) (int, error) {
	f, err := os.Open(against)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxPathsLine)
	total, unmatched := 0, 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var path []string
		if strings.HasPrefix(line, "[") {
			if err := json.Unmarshal([]byte(line), &path); err != nil {
				return 0, fmt.Errorf("%s:%d: want a JSON array of strings: %v", against, n, err)
			}
		} else {
			path = strings.Split(line, "/")
		}
		total++
		m := p.Match(path)
		if !m.Unmatched {
			continue
		}
		unmatched++
		why := "matches no node with limits"
		switch {
		case len(m.Hits) > 0:
			why = "reaches only shadow limits"
		case m.Depth < len(path):
			where := "at the root"
			if m.Pattern != "" {
				where = "below " + m.Pattern
			}
			why = fmt.Sprintf("no child matches %q %s", path[m.Depth], where)
		}
		fmt.Fprintf(e.stdout, "%s:%d: %s: unmatched: %s\n", against, n, showPath(path), why)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", against, err)
	}
	how := "allowed (unmatched: allow)"
	if p.DenyUnmatched() {
		how = "denied (unmatched: deny)"
	}
	fmt.Fprintf(e.stdout, "%s: %d of %d %s match no limit in %s, and would be %s\n", against, unmatched, total, plural(total, "path", "paths"), file, how)
	return unmatched, nil
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
