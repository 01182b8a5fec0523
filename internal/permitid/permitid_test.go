package permitid_test

import (
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/permitid"
)

// TestNew: 100 goroutines draw 1000 ids each (their buffers of 64
// refilled many times over): every id is 1 to algo.MaxPermitID, and no
// two are the same (53 random bits: a repeat among 100,000 has odds of
// about one in two million), so no buffered byte serves twice.
func TestNew(t *testing.T) {
	ids := make(chan []int64, 100)
	for range 100 {
		go func() {
			mine := make([]int64, 1000)
			for i := range mine {
				mine[i] = permitid.New()
			}
			ids <- mine
		}()
	}
	seen := make(map[int64]bool, 100_000)
	for range 100 {
		for _, id := range <-ids {
			if id < 1 || id > algo.MaxPermitID || seen[id] {
				t.Fatalf("id %d: out of range or drawn twice", id)
			}
			seen[id] = true
		}
	}
}
