package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
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

// TestCalendarOddMidnights decides, on both stores, a daily limit of 3 in
// the zones and on the days where a midnight does not happen once: it is
// skipped (Santiago, Havana, Asunción, São Paulo: the clock springs from
// 23:59:59 to 01:00), happens twice (Amman, Havana: back from 00:59:59 to
// 00:00), its whole day is skipped (Apia, 2011-12-30), or the clock goes
// back over it (St. John's, 1988: from 00:01 to 22:01 of the day before).
// Requests every 10 minutes for three days, and a millisecond either side
// of each window's bounds, at explicit times: each store admits the first
// 3 of each window and no more, and its RetryAfter and ResetAfter run to
// the window's end. The windows are the rule's (a day starts at the first
// instant whose wall clock shows that date or a later one), found here by
// reading the wall clock minute by minute.
func TestCalendarOddMidnights(t *testing.T) {
	st := stores(t)
	ctx := context.Background()
	for _, c := range []struct {
		zone string
		date string // the day of the odd midnight
	}{
		{"America/Santiago", "2026-09-06"},
		{"America/Havana", "2026-03-08"},
		{"America/Havana", "2026-11-01"},
		{"America/Asuncion", "2023-10-01"},
		{"America/Sao_Paulo", "2018-11-04"},
		{"Asia/Amman", "2021-10-29"},
		{"Pacific/Apia", "2011-12-30"},
		{"America/St_Johns", "1988-10-30"},
	} {
		loc, err := time.LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		day, err := time.Parse(time.DateOnly, c.date)
		if err != nil {
			t.Fatal(err)
		}
		// The starts of the days around it: the first minute whose wall
		// clock shows the date or a later one (every offset here is whole
		// minutes, so a transition is at a minute).
		var starts []time.Time
		for d := day.AddDate(0, 0, -2); !d.After(day.AddDate(0, 0, 3)); d = d.AddDate(0, 0, 1) {
			at := d.Add(-30 * time.Hour)
			for {
				w := at.In(loc)
				if !time.Date(w.Year(), w.Month(), w.Day(), 0, 0, 0, 0, time.UTC).Before(d) {
					break
				}
				at = at.Add(time.Minute)
			}
			starts = append(starts, at)
		}
		// The windows are the spans between distinct starts (a skipped
		// day's is empty); requests from the first to the last.
		var times []time.Time
		for at := starts[0]; at.Before(starts[len(starts)-1]); at = at.Add(10 * time.Minute) {
			times = append(times, at)
		}
		for _, s := range starts[1 : len(starts)-1] {
			times = append(times, s.Add(-time.Millisecond), s, s.Add(time.Millisecond))
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		lim := algo.FixedWindow{Count: 3, Calendar: algo.Calendar{Unit: "day", TimeZone: c.zone}}
		key := "odd-midnight:" + c.zone + ":" + c.date
		counted := map[time.Time]int64{} // a window's end: its count
		for _, at := range times {
			end := starts[sort.Search(len(starts), func(i int) bool { return starts[i].After(at) })]
			left := end.Sub(at)
			want := algo.Result{Quota: 3, RetryAfter: left, ResetAfter: left}
			if counted[end] < 3 {
				counted[end]++
				want = algo.Result{Allowed: true, Admitted: 1, Quota: 3, ResetAfter: left}
			}
			want.Remaining = 3 - counted[end]
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1, Time: at}
			if got := decideOnBoth(t, ctx, st, req, c.zone+" "+c.date); got != want {
				t.Fatalf("%s %s at %v (the window ends at %v):\n got %s\nwant %s", c.zone, c.date, at.In(loc), end.In(loc), conformance.Format(got), conformance.Format(want))
			}
		}
	}
}
