package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/memory"
)

// A GCRA limit with the arguments of redis-cell's CL.THROTTLE user123 15 30
// 60, decided on the embedded store at an explicit time.
func Example() {
	st := memory.New()
	defer st.Close()

	lim := algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}
	now := time.Unix(1800003000, 0)
	for i := 0; i < 17; i++ {
		r, err := st.Decide(context.Background(), sluice.Request{Key: sluice.Key("user", "user123"), Limit: lim, Cost: 1, Time: now})
		if err != nil {
			panic(err)
		}
		if i == 0 || i >= 15 {
			fmt.Println(r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, sluice.Cell(r))
		}
	}
	// Output:
	// true 15 0s 2s [0 16 15 -1 2]
	// true 0 0s 32s [0 16 0 -1 32]
	// false 0 2s 32s [1 16 0 2 32]
}
