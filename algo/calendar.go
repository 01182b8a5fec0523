package algo

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // time zones wherever the binary runs (an image without /usr/share/zoneinfo)
)

// A Calendar makes a FixedWindow's windows those of the calendar, in a
// time zone, instead of spans aligned to the Unix epoch: a quota that a
// business sells resets at midnight on the 1st (or the customer's billing
// day), on Monday, on New Year's Day. A day is 23 or 25 hours across a
// daylight-saving change; a window starts at 00:00 local time, or where
// midnight is skipped or repeated, at the first instant whose wall clock
// shows its first date (dayStart).
type Calendar struct {
	// Unit is "day", "week", "month" or "year".
	Unit string
	// TimeZone is an IANA name such as "Europe/Berlin"; "" is UTC.
	TimeZone string
	// AnchorDay, for a month, is the day of the month its windows start
	// on, 1 to 31 (0: the 1st); in a shorter month, its last day.
	AnchorDay int
	// WeekStart, for a week, is the day its windows start on: "monday"
	// ("", ISO 8601) to "sunday".
	WeekStart string
}

// Calendar units, as Spec.Window writes them.
const (
	calDay   = "day"
	calWeek  = "week"
	calMonth = "month"
	calYear  = "year"
)

// IsCalendarUnit reports whether s names a calendar window (day, week,
// month, year): what a limit's window may be beside a duration.
func IsCalendarUnit(s string) bool {
	switch s {
	case calDay, calWeek, calMonth, calYear:
		return true
	}
	return false
}

// calendar is a Calendar made ready: its zone loaded.
type calendar struct {
	unit      string
	loc       *time.Location
	anchor    int
	weekStart time.Weekday
	last      atomic.Pointer[[2]int64] // the window bounds found last
}

// calendars caches each Calendar's calendar: loading a zone reads the
// zone database.
var calendars sync.Map // Calendar -> *calendar

// compile validates c and returns its calendar.
func (c Calendar) compile() (*calendar, error) {
	if v, ok := calendars.Load(c); ok {
		return v.(*calendar), nil
	}
	if !IsCalendarUnit(c.Unit) {
		return nil, fmt.Errorf("%w: a calendar window is day, week, month or year, not %q", ErrInvalid, c.Unit)
	}
	cal := &calendar{unit: c.Unit, anchor: max(c.AnchorDay, 1), weekStart: time.Monday}
	var err error
	if cal.loc, err = time.LoadLocation(c.TimeZone); err != nil || c.TimeZone == "Local" {
		return nil, fmt.Errorf("%w: time_zone %q is not an IANA time zone, such as Europe/Berlin", ErrInvalid, c.TimeZone)
	}
	switch {
	case c.AnchorDay != 0 && c.Unit != calMonth:
		return nil, fmt.Errorf("%w: anchor_day is for a month's window, not a %s's", ErrInvalid, c.Unit)
	case c.AnchorDay < 0 || c.AnchorDay > 31:
		return nil, fmt.Errorf("%w: anchor_day must be 1 to 31, got %d", ErrInvalid, c.AnchorDay)
	case c.WeekStart != "" && c.Unit != calWeek:
		return nil, fmt.Errorf("%w: week_start is for a week's window, not a %s's", ErrInvalid, c.Unit)
	case c.WeekStart != "":
		d, ok := weekdays[strings.ToLower(c.WeekStart)]
		if !ok {
			return nil, fmt.Errorf("%w: week_start must be a day, monday to sunday, got %q", ErrInvalid, c.WeekStart)
		}
		cal.weekStart = d
	}
	v, _ := calendars.LoadOrStore(c, cal)
	return v.(*calendar), nil
}

var weekdays = map[string]time.Weekday{
	"monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday, "thursday": time.Thursday,
	"friday": time.Friday, "saturday": time.Saturday, "sunday": time.Sunday,
}

// bounds returns the start and end (µs since the epoch) of the window that
// holds t: start ≤ t < end. The windows part time with no gap or overlap,
// so that the one found last holds every t from its start to its end.
func (c *calendar) bounds(t int64) (start, end int64) {
	if w := c.last.Load(); w != nil && w[0] <= t && t < w[1] {
		return w[0], w[1]
	}
	start, end = c.window(t)
	c.last.Store(&[2]int64{start, end})
	return start, end
}

// window computes bounds: a window runs from the start of its first day
// to the start of the next window's (dayStart).
func (c *calendar) window(t int64) (start, end int64) {
	y, m, d := time.UnixMicro(t).In(c.loc).Date()
	// The day that holds t is its wall clock's date, or a later one when
	// the clock went back to a date that had ended (St John's, 1988: from
	// 00:01 to 22:01 of the day before).
	next := c.dayStart(y, m, d+1)
	for next <= t {
		d++
		next = c.dayStart(y, m, d+1)
	}
	y, m, d = civil(y, m, d).Date()
	var s, e int64
	switch c.unit {
	case calDay:
		s, e = c.dayStart(y, m, d), next
	case calWeek:
		back := (int(civil(y, m, d).Weekday()) - int(c.weekStart) + 7) % 7
		s, e = c.dayStart(y, m, d-back), c.dayStart(y, m, d-back+7)
	case calMonth:
		// The anchor day of month m, or the month's last day if shorter.
		anchor := func(y int, m time.Month) time.Time {
			last := civil(y, m+1, 0).Day()
			return civil(y, m, min(c.anchor, last))
		}
		a, b := anchor(y, m), anchor(y, m+1)
		if civil(y, m, d).Before(a) {
			a, b = anchor(y, m-1), a
		}
		s, e = c.dayStart(a.Date()), c.dayStart(b.Date())
	default: // year
		s, e = c.dayStart(y, 1, 1), c.dayStart(y+1, 1, 1)
	}
	return s, e
}

// civil returns the date y-m-d (normalized: October 32 is November 1) at
// 00:00 UTC, for the calendar's arithmetic, which no time zone changes.
func civil(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// maxOffset bounds a zone's offset from UTC (the tz database's are within
// ±16h): no instant more than this before a date's 00:00 UTC shows it.
const maxOffset = 26 * 60 * 60

// dayStart returns when the date y-m-d starts in the calendar's zone (µs
// since the epoch): at the first instant whose wall clock shows that date
// or a later one. That is its 00:00, or where no 00:00 exists (the clock
// springs from 23:59:59 to 01:00) the instant the date's clock begins; of
// a 00:00 that happens twice, the first; of a date the zone skipped (Apia,
// 2011-12-30), the next date's start, so that its window is empty. Starts
// never decrease from one date to the next, so windows never overlap.
//
// In a span of one offset [a, b), the instants whose wall clock shows the
// date or a later one are those from the date's 00:00 at that offset on;
// the first of them over the spans around the date is its start.
func (c *calendar) dayStart(y int, m time.Month, d int) int64 {
	midnight := civil(y, m, d).Unix() // the date's 00:00 were the offset 0
	from := midnight - maxOffset
	start := int64(math.MaxInt64)
	for {
		at := time.Unix(from, 0).In(c.loc)
		_, off := at.Zone()
		_, b := at.ZoneBounds()
		if !b.IsZero() && b.Unix() <= from {
			// Go's ZoneBounds ends a span that its zone's rule serves (after
			// the last transition listed) at 365 days after the UTC year's
			// start, before the instant on a leap year's December 31st
			// (golang/go#81583): it ends at the next year's.
			b = civil(at.UTC().Year()+1, 1, 1)
		}
		first := max(from, midnight-int64(off))
		if b.IsZero() || first < b.Unix() {
			start = min(start, first)
		}
		// The instants of later spans are later than one found already,
		// or than maxOffset after the date's 00:00 UTC, which shows it.
		if b.IsZero() || b.Unix() >= start || b.Unix() > midnight+maxOffset {
			break
		}
		from = b.Unix()
	}
	return start * 1e6
}

// nominal is a calendar window's length for what states one length (the
// RateLimit-Policy's w, Envoy's unit): 1, 7, 30 or 365 days.
func (c Calendar) nominal() time.Duration {
	switch c.Unit {
	case calWeek:
		return 7 * 24 * time.Hour
	case calMonth:
		return 30 * 24 * time.Hour
	case calYear:
		return 365 * 24 * time.Hour
	}
	return 24 * time.Hour
}
