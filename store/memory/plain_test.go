package memory

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// TestPlainIsValid: the inline check the store's entry points make
// before store.Validate accepts only requests that Validate accepts, and
// does accept the common one (so that it is not a check that never
// passes), over keys, plans, costs and times at and beyond their bounds.
func TestPlainIsValid(t *testing.T) {
	gcra := algo.MustCompile(algo.GCRA{Burst: 10, Count: 10, Period: time.Second})
	exact := algo.MustCompile(algo.SlidingLog{Limits: []algo.Window{{Count: 10, Window: time.Second}}})
	keys := []string{"", "k", strings.Repeat("k", store.MaxKeyLen), strings.Repeat("k", store.MaxKeyLen+1)}
	plans := []*algo.Plan{nil, new(algo.Plan), gcra, exact}
	costs := []int64{-1 << 63, -1, 0, 1, algo.MaxExactCost, algo.MaxExactCost + 1, algo.MaxCount, algo.MaxCount + 1, 1<<63 - 1}
	times := []time.Time{{}, time.Unix(1_800_000_000, 0), time.Unix(-1, 0), time.UnixMicro(algo.MaxTime + 1)}
	accepted := 0
	for _, key := range keys {
		for _, p := range plans {
			for _, cost := range costs {
				for _, at := range times {
					if !plain(key, p, cost, at) {
						continue
					}
					accepted++
					if err := store.Validate(key, "", p, cost, at); err != nil {
						t.Errorf("plain accepts what Validate refuses: key of %d bytes, plan %v, cost %d, time %v: %v", len(key), p, cost, at, err)
					}
				}
			}
		}
	}
	if !plain("k", gcra, 1, time.Time{}) || accepted == 0 {
		t.Fatal("plain refuses the common request")
	}
	t.Logf("%d requests plain", accepted)
}
