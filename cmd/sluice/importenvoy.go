package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/server/envoyimport"
)

func runImportEnvoy(_ context.Context, e env, args []string) int {
	fs := newFlags(e, "import-envoy", `usage: sluice import-envoy [-o limits.yaml] envoy-config.yaml|dir...

Converts envoyproxy/ratelimit configuration files (one domain each: nested
descriptors with key, value, rate_limit {requests_per_unit, unit, name,
replaces, unlimited}, shadow_mode, share_threshold, detailed_metric,
value_to_metric) into one limits.yaml that sluice serve's gRPC
ShouldRateLimit matches as envoyproxy/ratelimit matches the originals. A
directory stands for its *.yaml and *.yml files, as Envoy's service loads
its config directory. What cannot be converted is an error naming its file,
line and field, and nothing is written: with -o the file is replaced only
when the whole import succeeded (a shell's > would leave an empty file).

flags:`)
	out := fs.String("o", "", "write the policy to this file (atomically, only when the whole import succeeds) instead of stdout")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	names, err := configFiles(fs.Args())
	if err != nil {
		fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
		return 1
	}
	var files []envoyimport.File
	for _, name := range names {
		data, err := yamlfile.ReadFile(name)
		if err != nil {
			fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
			return 1
		}
		files = append(files, envoyimport.File{Name: name, Data: data})
	}
	policy, warnings, err := envoyimport.Convert(files, "")
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "import-envoy: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
		return 1
	}
	if *out == "" {
		e.stdout.Write(policy)
		return 0
	}
	if err := writeAtomically(*out, policy); err != nil {
		fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
		return 1
	}
	return 0
}

// configFiles expands directories into their *.yaml and *.yml files,
// sorted; files are taken as they are.
func configFiles(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		var found []string
		for _, en := range entries {
			if n := en.Name(); en.Type().IsRegular() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				found = append(found, filepath.Join(a, n))
			}
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s holds no .yaml or .yml file", a)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// writeAtomically writes data to a temporary file beside name and renames
// it over name, so that name is either the old file or the whole new one.
func writeAtomically(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
