package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue/backend"
	"github.com/sluicehq/sluice/store/redis"
)

// TestQueueKeysShareSlot: a queue's keys share one hash tag, and a name
// cannot choose another queue's tag.
func TestQueueKeysShareSlot(t *testing.T) {
	if a, b := redis.QueueKey("p:", "a}b{c"), redis.QueueKey("p:", "a"); a == b || a != "p:{queue:a%7Db%7Bc}" {
		t.Fatalf("keys %q %q", a, b)
	}
}

// TestQueueFailAfterAck: a delivery that fails after another worker acked
// its entry records nothing: no error is left behind in the errors hash.
func TestQueueFailAfterAck(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	q, err := st.Queue(ctx, "jobs", "workers", 10)
	if err != nil {
		t.Fatal(err)
	}
	a, err := q.Add(ctx, "", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if es, err := q.Read(ctx, "w1", 1, time.Second); err != nil || len(es) != 1 {
		t.Fatalf("read: %v %v", es, err)
	}
	if ok, err := q.Ack(ctx, a.ID, false); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if err := q.Fail(ctx, a.ID, "late"); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Do("HLEN", redis.QueueKey(redis.DefaultPrefix, "jobs")+":errors"); err != nil || n != "0" {
		t.Fatalf("errors hash holds %s fields (%v) after the entry was acked", n, err)
	}
}

// TestQueueForgetsHandledDedupIDs: a handled entry's dedup id answers its
// entry only within the dedup window (set to nothing here), and what it
// remembered is gone from Redis once forgotten.
func TestQueueForgetsHandledDedupIDs(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	q, err := st.Queue(ctx, "jobs", "workers", 10)
	if err != nil {
		t.Fatal(err)
	}
	redis.SetDedupWindow(q, 0)
	for i := range 2 {
		a, err := q.Add(ctx, "k", []byte(`{}`))
		if err != nil || a.Outcome != backend.New {
			t.Fatalf("add %d: %+v %v, want a new entry (the window has ended)", i, a, err)
		}
		if es, err := q.Read(ctx, "w1", 1, time.Second); err != nil || len(es) != 1 {
			t.Fatalf("read: %v %v", es, err)
		}
		if ok, err := q.Ack(ctx, a.ID, false); !ok || err != nil {
			t.Fatalf("ack: %v %v", ok, err)
		}
	}
	// The second ack forgot the first's id; the last stays until the next.
	if n, err := srv.Do("ZCARD", redis.QueueKey(redis.DefaultPrefix, "jobs")+":handled-at"); err != nil || n != "1" {
		t.Errorf("handled ids held: %s %v, want 1", n, err)
	}
}
