package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/queue/backend"
)

// The store's key names and hash slots, for the tests of package
// redis_test, which check where keys land.
var (
	KeyName      = keyName
	ConsumersKey = consumersKey
	QueueKey     = queueKey
)

// SetDedupWindow sets how long a queue remembers a handled dedup id.
func SetDedupWindow(q backend.Queue, d time.Duration) {
	q.(*queue).dedupWindow = strconv.FormatInt(d.Milliseconds(), 10)
}

// OpenRegion opens a region's store (Options.Home set) whose global
// shares are refilled only by RefillAt, at the test's own times.
func OpenRegion(ctx context.Context, url string, opts Options) (*Store, error) {
	opts.manualRefill = true
	return Open(ctx, url, opts)
}

// RefillAt refills every global share the store follows, at time at, with
// the horizon until the next refill.
func (s *Store) RefillAt(ctx context.Context, at time.Time, horizon time.Duration) {
	s.refillAt(ctx, at, horizon)
}

// NewRegion is OpenRegion on an existing client, which the caller keeps.
func NewRegion(c rueidis.Client, opts Options) (*Store, error) {
	opts.manualRefill = true
	return New(c, opts)
}
