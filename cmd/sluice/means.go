package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// means says in words what a limit admits, such as "10 at once, then 20 a
// minute (one every 3s)": its numbers read as a user would, whatever the
// algorithm's own vocabulary (a gcra's burst is one less than what it
// admits at once).
func means(s algo.Spec) string {
	var out string
	switch s.Algorithm {
	case "gcra":
		out = fmt.Sprintf("%d at once, then %s", s.Burst+1, rate(s.Count, s.Period))
	case "token_bucket":
		out = fmt.Sprintf("%d at once (a full bucket), then %s", s.Burst, rate(s.Rate, s.Per))
	case "fixed_window":
		if s.Calendar != "" {
			out = fmt.Sprintf("%d a calendar %s (%s)", s.Limit, s.Calendar, resets(s))
			break
		}
		out = fmt.Sprintf("%d per %s window (windows start afresh at each multiple of %s since 1970-01-01 00:00 UTC)", s.Limit, short(s.Window), short(s.Window))
	case "gate":
		out = fmt.Sprintf("one at a time, then none for %s", short(s.Interval))
	case "concurrency":
		out = fmt.Sprintf("at most %d held at once, each until released or %s after its holder last renewed it", s.Limit, short(s.HoldFor))
	case "sliding_log", "window_counter":
		var ws []string
		for _, w := range s.Limits {
			ws = append(ws, fmt.Sprintf("%d in any %s", w.Limit, short(w.Window)))
		}
		out = "at most " + strings.Join(ws, " and ")
		if s.Algorithm == "window_counter" {
			slice := s.Slice
			if slice == 0 {
				slice = time.Second // a zero Slice is 1s
			}
			out += fmt.Sprintf(", counted in slices of %s (a window's start is rounded to one)", short(slice))
		} else if s.Buckets != nil {
			out += fmt.Sprintf(", sampled in %d buckets a window", *s.Buckets)
		}
		if s.MinGap > 0 {
			out += fmt.Sprintf(", and %s at least between two", short(s.MinGap))
		}
	default:
		return ""
	}
	return out
}

// short writes d without its zero tails: 1h, 1m, 90s, not 1h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// rate says "20 a minute (one every 3s)".
func rate(n int64, per time.Duration) string {
	unit := map[time.Duration]string{time.Second: "a second", time.Minute: "a minute", time.Hour: "an hour", 24 * time.Hour: "a day"}[per]
	if unit == "" {
		unit = "per " + short(per)
	}
	if n <= 1 {
		return fmt.Sprintf("%d %s", n, unit)
	}
	return fmt.Sprintf("%d %s (one every %s)", n, unit, short(per/time.Duration(n)))
}

// resets says in words when a calendar window resets: "resets on the 1st
// at 00:00 Europe/Berlin".
func resets(s algo.Spec) string {
	zone := s.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	switch s.Calendar {
	case "day":
		return "resets every day at 00:00 " + zone
	case "week":
		ws := "Monday"
		if s.WeekStart != "" {
			ws = strings.ToUpper(s.WeekStart[:1]) + strings.ToLower(s.WeekStart[1:])
		}
		return "resets every " + ws + " at 00:00 " + zone
	case "month":
		d := max(s.AnchorDay, 1)
		out := fmt.Sprintf("resets on the %d%s at 00:00 %s", d, ordinal(d), zone)
		if d > 28 {
			out += " (on a shorter month's last day)"
		}
		return out
	}
	return "resets on January 1st at 00:00 " + zone
}

// ordinal is the suffix of an ordinal number: st, nd, rd or th.
func ordinal(d int64) string {
	switch {
	case d%100 >= 11 && d%100 <= 13:
		return "th"
	case d%10 == 1:
		return "st"
	case d%10 == 2:
		return "nd"
	case d%10 == 3:
		return "rd"
	}
	return "th"
}
