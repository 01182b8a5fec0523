package policy_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

func TestHolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var zero policy.Current
	if zero.Load() != nil {
		t.Error("the zero Current holds a policy")
	}

	write(seed)
	h := policy.NewCurrent(nil)
	if err := h.Reload(path); err != nil {
		t.Fatal(err)
	}
	first := h.Load()
	if len(first.Match([]string{"user", "alex", "trade"}).Hits) != 2 {
		t.Fatal("first policy does not match")
	}

	// A bad file keeps the old policy and reports why.
	write("schema:\n  user: {limits: [1, 2]}\n")
	if err := h.Reload(path); err == nil {
		t.Error("Reload of a bad file succeeded")
	}
	if h.Load() != first {
		t.Error("bad file replaced the policy")
	}
	if err := h.Reload(filepath.Join(dir, "missing.yaml")); err == nil || h.Load() != first {
		t.Errorf("missing file: err %v, replaced %v", err, h.Load() != first)
	}

	// Readers see either policy, whole, while reloads go on.
	write("schema:\n  user: {limits: [1, 2, 3]}\n")
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
		if err := h.Reload(path); err != nil {
			t.Error(err)
		}
		h.Store(first)
	}
	close(stop)
	wg.Wait()
	if err := h.Reload(path); err != nil || h.Load() == first {
		t.Errorf("good file: err %v", err)
	}
}
