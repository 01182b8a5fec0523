package conformance_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// TestCalendarStoresAgree plays random traces on fixed windows of the
// calendar (every unit, zones with and without daylight saving, anchor
// days past short months' ends, week starts), with times that leap hours
// and days ahead and land near midnights, and penalties and rewards, on
// both stores: every result is identical.
func TestCalendarStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 53)
	ctx := context.Background()
	zones := []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}
	for trace := range 40 {
		c := algo.Calendar{Unit: []string{"day", "week", "month", "year"}[trace%4], TimeZone: zones[r.IntN(len(zones))]}
		switch c.Unit {
		case "month":
			c.AnchorDay = []int{0, 15, 29, 30, 31}[r.IntN(5)]
		case "week":
			c.WeekStart = []string{"", "sunday", "saturday"}[r.IntN(3)]
		}
		lim := algo.FixedWindow{Count: 1 + r.Int64N(5), Calendar: c}
		key := "calendar:" + strconv.Itoa(trace)
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(365 * 24 * time.Hour))))
		for step := range 60 {
			// Mostly within the window, sometimes to just before or after
			// a midnight, sometimes days on.
			switch r.IntN(4) {
			case 0:
				at = at.Add(time.Duration(r.Int64N(int64(48 * time.Hour))))
			case 1:
				next := at.Truncate(time.Hour).Add(time.Duration(1+r.IntN(30)) * time.Hour)
				at = next.Add(time.Duration(r.Int64N(3)-1) * time.Millisecond)
			default:
				at = at.Add(time.Duration(r.Int64N(int64(time.Hour))))
			}
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: r.Int64N(4), Time: at}
			if step%9 == 8 {
				op := []algo.Adjust{algo.Penalize, algo.Reward}[r.IntN(2)]
				req.Cost = 1 + r.Int64N(3)
				for _, name := range []string{"memory", "redis"} {
					if err := st[name].(store.Adjuster).Adjust(ctx, req, op); err != nil {
						t.Fatalf("trace %d step %d on %s: %v", trace, step, name, err)
					}
				}
				continue
			}
			decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d (%+v)", trace, step, c))
		}
	}
}
