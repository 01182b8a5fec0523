package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store/memory"
)

// A queue of capacity 2 on the memory store: the third entry is refused
// until a worker has handled one.
func Example() {
	ctx := context.Background()
	st := memory.New() // or redis.Open(ctx, "redis://127.0.0.1:6379/0", redis.Options{})
	defer st.Close()
	q, err := queue.Open(ctx, st, "thumbnails", queue.Options{Capacity: 2})
	if err != nil {
		panic(err)
	}
	for _, img := range []string{"a.png", "b.png", "c.png"} {
		_, err := q.Add(ctx, map[string]string{"image": img}, "")
		if errors.Is(err, queue.ErrFull) {
			fmt.Println("full:", img)
		}
	}

	// Work runs until its context is done: here, once both are handled.
	work, stop := context.WithCancel(ctx)
	defer stop()
	handled := 0
	counts, err := q.Work(work, func(ctx context.Context, e queue.Entry) error {
		fmt.Println("resize", e.Fields["image"])
		if handled++; handled == 2 {
			stop() // the entry in hand is still acked
		}
		return nil // nil acks; an error retries, then dead-letters
	}, queue.WorkerOptions{Rate: 100, MaxDeliveries: 3})
	fmt.Println(counts.Handled, err)
	// Output:
	// full: c.png
	// resize a.png
	// resize b.png
	// 2 <nil>
}
