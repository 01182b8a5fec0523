package memory_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/queue/backend"
	"github.com/sluicehq/sluice/store/memory"
)

// TestQueueForgetsHandledDedupIDs: a handled entry's dedup id answers its
// entry only within the dedup window (set to nothing here).
func TestQueueForgetsHandledDedupIDs(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	q, err := st.Queue(ctx, "jobs", "workers", 10)
	if err != nil {
		t.Fatal(err)
	}
	memory.SetDedupWindow(q, 0)
	for i := range 2 {
		a, err := q.Add(ctx, "k", []byte(`{}`))
		if err != nil || a.Outcome != backend.New {
			t.Fatalf("add %d: %+v %v, want a new entry (the window has ended)", i, a, err)
		}
		if es, err := q.Read(ctx, "w1", 1, 0); err != nil || len(es) != 1 {
			t.Fatalf("read: %v %v", es, err)
		}
		if ok, err := q.Ack(ctx, a.ID, false); !ok || err != nil {
			t.Fatalf("ack: %v %v", ok, err)
		}
	}
}
