package main

import (
	"context"
	"fmt"
)

func runImportEnvoy(ctx context.Context, e env, args []string) int {
	fmt.Fprintln(e.stderr, "import-envoy: not implemented yet")
	return 1
}
