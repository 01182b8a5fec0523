package redis_test

import (
	"testing"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redis"
)

// TestWindowedConcurrency: 100 goroutines race for one key of each
// sliding log mode and a window counter; exactly the limit is admitted.
func TestWindowedConcurrency(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	conformance.RunConcurrency(t, st, "redis", conformance.WindowedRacers)
	t.Run("batch", func(t *testing.T) { conformance.RunBatchConcurrency(t, st, "redis") })
	t.Run("nary in a batch", func(t *testing.T) { conformance.RunNaryInBatch(t, st, "redis") })
}
