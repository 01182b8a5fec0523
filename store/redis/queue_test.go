package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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
