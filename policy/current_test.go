package policy_test

import (
	"sync"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// TestCurrent: readers see one policy or the other, whole, while another
// goroutine replaces it.
func TestCurrent(t *testing.T) {
	var zero policy.Current
	if zero.Load() != nil {
		t.Error("the zero Current holds a policy")
	}
	first := mustParse(t, seed)
	second := mustParse(t, "schema:\n  user: {limits: [1, 2, 3]}\n")
	h := policy.NewCurrent(first)
	if h.Load() != first || len(first.Match([]string{"user", "alex", "trade"}).Hits) != 2 {
		t.Fatal("NewCurrent does not hold the first policy")
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := len(h.Load().Match([]string{"user", "alex", "trade"}).Hits); n != 1 && n != 2 {
					t.Errorf("%d levels", n)
					return
				}
			}
		}()
	}
	for range 20 {
		h.Store(second)
		h.Store(first)
	}
	close(stop)
	wg.Wait()
	h.Store(second)
	if h.Load() != second {
		t.Error("Store did not replace the policy")
	}
}
