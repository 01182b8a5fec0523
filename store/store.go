// Package store opens a Sluice store by URL: "memory" (or "" or
// "memory://") for the embedded store, or a redis:// or rediss:// URL for
// Redis (see store/redis.Open for Cluster and Sentinel forms).
package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// Open returns the store the URL names.
func Open(ctx context.Context, url string) (sluice.Store, error) {
	switch {
	case url == "", url == "memory", url == "memory://":
		return memory.New(), nil
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"):
		return redis.Open(ctx, url, redis.Options{})
	}
	return nil, fmt.Errorf("store: unknown store URL %q (want memory or redis://host:port/db)", url)
}
