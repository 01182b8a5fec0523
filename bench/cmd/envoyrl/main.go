// Command envoyrl is envoyproxy/ratelimit, Envoy's reference rate limit
// service, built from its Go module so that bench/envoy.sh can run it next
// to sluice serve. It is configured, as upstream is, by environment
// variables (REDIS_URL, RUNTIME_ROOT, LOCAL_CACHE_SIZE_IN_BYTES, ...).
package main

import (
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}
