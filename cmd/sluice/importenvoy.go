package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/server/envoyimport"
)

func runImportEnvoy(_ context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("import-envoy", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: sluice import-envoy envoy-config.yaml... > limits.yaml

Converts envoyproxy/ratelimit configuration files (one domain each: nested
descriptors with key, value, rate_limit {requests_per_unit, unit},
unlimited, shadow_mode) into one limits.yaml that sluice serve's gRPC
ShouldRateLimit matches as envoyproxy/ratelimit matches the originals:
domain D with entries (k1, v1)...(kn, vn) is the path D/k1/v1/.../kn/vn, a
key without a value is "*", requests_per_unit per unit is a fixed window.
Warnings about what is ignored go to stderr; what cannot be converted is an
error naming its file, line and field, and nothing is printed.`)
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var files []envoyimport.File
	for _, name := range fs.Args() {
		data, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
			return 1
		}
		files = append(files, envoyimport.File{Name: name, Data: data})
	}
	out, warnings, err := envoyimport.Convert(files)
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "import-envoy: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "import-envoy: %v\n", err)
		return 1
	}
	e.stdout.Write(out)
	return 0
}
