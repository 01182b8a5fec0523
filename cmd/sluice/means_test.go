package main

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// TestMeans: every algorithm's numbers in words, hand-checked; the
// shorthand [burst, count, period] says what it admits at once.
func TestMeans(t *testing.T) {
	four := int64(4)
	for _, tc := range []struct {
		spec algo.Spec
		want string
	}{
		{algo.Spec{Algorithm: "gcra", Burst: 1, Count: 1, Period: time.Minute}, "2 at once, then 1 a minute"},
		{algo.Spec{Algorithm: "gcra", Burst: 100, Count: 60, Period: time.Minute}, "101 at once, then 60 a minute (one every 1s)"},
		{algo.Spec{Algorithm: "token_bucket", Burst: 10, Rate: 5, Per: time.Second}, "10 at once (a full bucket), then 5 a second (one every 200ms)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 3, Window: 90 * time.Minute}, "3 per 1h30m window (windows start afresh at each multiple of 1h30m since 1970-01-01 00:00 UTC)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 100000, Calendar: "month", TimeZone: "Europe/Berlin"}, "100000 a calendar month (resets on the 1st at 00:00 Europe/Berlin)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 9, Calendar: "month", AnchorDay: 31}, "9 a calendar month (resets on the 31st at 00:00 UTC (on a shorter month's last day))"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 7, Calendar: "week", TimeZone: "America/New_York", WeekStart: "sunday"}, "7 a calendar week (resets every Sunday at 00:00 America/New_York)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 1, Calendar: "year"}, "1 a calendar year (resets on January 1st at 00:00 UTC)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 2, Calendar: "month", AnchorDay: 22}, "2 a calendar month (resets on the 22nd at 00:00 UTC)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 3, Calendar: "month", AnchorDay: 12}, "3 a calendar month (resets on the 12th at 00:00 UTC)"},
		{algo.Spec{Algorithm: "fixed_window", Limit: 4, Calendar: "day", TimeZone: "Asia/Tokyo"}, "4 a calendar day (resets every day at 00:00 Asia/Tokyo)"},
		{algo.Spec{Algorithm: "gate", Interval: time.Minute}, "one at a time, then none for 1m"},
		{algo.Spec{Algorithm: "concurrency", Limit: 5, HoldFor: 30 * time.Second}, "at most 5 held at once, each until released or 30s after its holder last renewed it"},
		{algo.Spec{Algorithm: "sliding_log", Limits: algo.WindowSpecs{{Limit: 10, Window: time.Second}, {Limit: 100, Window: time.Hour}}, MinGap: 50 * time.Millisecond, Buckets: &four},
			"at most 10 in any 1s and 100 in any 1h, sampled in 4 buckets a window, and 50ms at least between two"},
		{algo.Spec{Algorithm: "window_counter", Limits: algo.WindowSpecs{{Limit: 100, Window: time.Minute}}}, "at most 100 in any 1m, counted in slices of 1s (a window's start is rounded to one)"},
	} {
		if got := means(tc.spec); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.spec, got, tc.want)
		}
	}
	for k := algo.Kind(0); int(k) < algo.NumKinds; k++ {
		if means(algo.Spec{Algorithm: k.String()}) == "" {
			t.Errorf("%v has no words", k)
		}
	}
}
