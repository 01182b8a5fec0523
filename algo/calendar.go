package algo

import (
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // time zones wherever the binary runs (an image without /usr/share/zoneinfo)
)

// A Calendar makes a FixedWindow's windows those of the calendar, in a
// time zone, instead of spans aligned to the Unix epoch: a quota that a
// business sells resets at midnight on the 1st (or the customer's billing
// day), on Monday, on New Year's Day. A day is 23 or 25 hours across a
// daylight-saving change; a window starts at 00:00 local time.
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
// holds t: start ≤ t < end.
func (c *calendar) bounds(t int64) (start, end int64) {
	tt := time.UnixMicro(t).In(c.loc)
	y, m, d := tt.Date()
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, c.loc) }
	var s, e time.Time
	switch c.unit {
	case calDay:
		s, e = day(y, m, d), day(y, m, d+1)
	case calWeek:
		back := (int(tt.Weekday()) - int(c.weekStart) + 7) % 7
		s, e = day(y, m, d-back), day(y, m, d-back+7)
	case calMonth:
		// The anchor day of month m, or the month's last day if shorter.
		anchor := func(y int, m time.Month) time.Time {
			last := day(y, m+1, 0).Day()
			return day(y, m, min(c.anchor, last))
		}
		if a := anchor(y, m); tt.Before(a) {
			s, e = anchor(y, m-1), a
		} else {
			s, e = a, anchor(y, m+1)
		}
	default: // year
		s, e = day(y, 1, 1), day(y+1, 1, 1)
	}
	return s.UnixMicro(), e.UnixMicro()
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

// Describe says in words when the window resets, for explain: "resets on
// the 1st at 00:00 Europe/Berlin".
func (c Calendar) Describe() string {
	zone := c.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	switch c.Unit {
	case calDay:
		return "resets every day at 00:00 " + zone
	case calWeek:
		ws := "Monday"
		if c.WeekStart != "" {
			ws = strings.ToUpper(c.WeekStart[:1]) + strings.ToLower(c.WeekStart[1:])
		}
		return "resets every " + ws + " at 00:00 " + zone
	case calMonth:
		d := max(c.AnchorDay, 1)
		s := fmt.Sprintf("resets on the %d%s at 00:00 %s", d, ordinal(d), zone)
		if d > 28 {
			s += " (on a shorter month's last day)"
		}
		return s
	}
	return "resets on January 1st at 00:00 " + zone
}

func ordinal(d int) string {
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
