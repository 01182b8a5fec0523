package algo

import (
	"errors"
	"testing"
	"time"
)

// TestCalendarBounds: calendar windows by hand, through month ends (31,
// 30, February), an anchor day of 31, a week's start, and both
// daylight-saving changes in Europe/Berlin and America/New_York, where a
// day is 23 or 25 hours.
func TestCalendarBounds(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	ny, _ := time.LoadLocation("America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	for _, c := range []struct {
		name       string
		cal        Calendar
		t          time.Time
		start, end time.Time
		hours      float64 // the window's length, when it says something
	}{
		{"Berlin day before spring forward", Calendar{Unit: "day", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 3, 27, 12, 0), at(berlin, 2027, 3, 27, 0, 0), at(berlin, 2027, 3, 28, 0, 0), 24},
		{"Berlin spring forward: 23 hours", Calendar{Unit: "day", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 3, 28, 12, 0), at(berlin, 2027, 3, 28, 0, 0), at(berlin, 2027, 3, 29, 0, 0), 23},
		{"Berlin fall back: 25 hours", Calendar{Unit: "day", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 10, 31, 12, 0), at(berlin, 2027, 10, 31, 0, 0), at(berlin, 2027, 11, 1, 0, 0), 25},
		{"New York spring forward: 23 hours", Calendar{Unit: "day", TimeZone: "America/New_York"}, at(ny, 2027, 3, 14, 12, 0), at(ny, 2027, 3, 14, 0, 0), at(ny, 2027, 3, 15, 0, 0), 23},
		{"New York fall back: 25 hours", Calendar{Unit: "day", TimeZone: "America/New_York"}, at(ny, 2027, 11, 7, 12, 0), at(ny, 2027, 11, 7, 0, 0), at(ny, 2027, 11, 8, 0, 0), 25},
		{"UTC day", Calendar{Unit: "day"}, at(time.UTC, 2027, 1, 15, 8, 50), at(time.UTC, 2027, 1, 15, 0, 0), at(time.UTC, 2027, 1, 16, 0, 0), 24},
		{"January's last minute", Calendar{Unit: "month", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 1, 31, 23, 59), at(berlin, 2027, 1, 1, 0, 0), at(berlin, 2027, 2, 1, 0, 0), 31 * 24},
		{"February", Calendar{Unit: "month", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 2, 1, 0, 0), at(berlin, 2027, 2, 1, 0, 0), at(berlin, 2027, 3, 1, 0, 0), 28 * 24},
		{"March: spring forward inside", Calendar{Unit: "month", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 3, 31, 23, 0), at(berlin, 2027, 3, 1, 0, 0), at(berlin, 2027, 4, 1, 0, 0), 31*24 - 1},
		{"April: 30 days", Calendar{Unit: "month", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 4, 30, 23, 0), at(berlin, 2027, 4, 1, 0, 0), at(berlin, 2027, 5, 1, 0, 0), 30 * 24},
		{"anchor 31 in February", Calendar{Unit: "month", TimeZone: "Europe/Berlin", AnchorDay: 31}, at(berlin, 2027, 2, 15, 9, 0), at(berlin, 2027, 1, 31, 0, 0), at(berlin, 2027, 2, 28, 0, 0), 28 * 24},
		{"anchor 31 from February's last day", Calendar{Unit: "month", TimeZone: "Europe/Berlin", AnchorDay: 31}, at(berlin, 2027, 3, 1, 0, 0), at(berlin, 2027, 2, 28, 0, 0), at(berlin, 2027, 3, 31, 0, 0), 31*24 - 1},
		{"anchor 31 in April", Calendar{Unit: "month", TimeZone: "Europe/Berlin", AnchorDay: 31}, at(berlin, 2027, 4, 30, 0, 0), at(berlin, 2027, 4, 30, 0, 0), at(berlin, 2027, 5, 31, 0, 0), 31 * 24},
		{"anchor 15, before it", Calendar{Unit: "month", TimeZone: "America/New_York", AnchorDay: 15}, at(ny, 2027, 3, 14, 23, 59), at(ny, 2027, 2, 15, 0, 0), at(ny, 2027, 3, 15, 0, 0), 28*24 - 1},
		{"ISO week (Monday)", Calendar{Unit: "week", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 1, 13, 12, 0), at(berlin, 2027, 1, 11, 0, 0), at(berlin, 2027, 1, 18, 0, 0), 7 * 24},
		{"week from Sunday", Calendar{Unit: "week", TimeZone: "America/New_York", WeekStart: "sunday"}, at(ny, 2027, 1, 13, 12, 0), at(ny, 2027, 1, 10, 0, 0), at(ny, 2027, 1, 17, 0, 0), 7 * 24},
		{"week from Sunday, on Sunday", Calendar{Unit: "week", TimeZone: "America/New_York", WeekStart: "Sunday"}, at(ny, 2027, 1, 17, 0, 0), at(ny, 2027, 1, 17, 0, 0), at(ny, 2027, 1, 24, 0, 0), 7 * 24},
		{"week over spring forward", Calendar{Unit: "week", TimeZone: "America/New_York", WeekStart: "sunday"}, at(ny, 2027, 3, 16, 0, 0), at(ny, 2027, 3, 14, 0, 0), at(ny, 2027, 3, 21, 0, 0), 7*24 - 1},
		{"year", Calendar{Unit: "year", TimeZone: "Europe/Berlin"}, at(berlin, 2027, 12, 31, 23, 59), at(berlin, 2027, 1, 1, 0, 0), at(berlin, 2028, 1, 1, 0, 0), 365 * 24},
	} {
		cal, err := c.cal.compile()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		s, e := cal.bounds(c.t.UnixMicro())
		if s != c.start.UnixMicro() || e != c.end.UnixMicro() {
			t.Errorf("%s: [%v, %v), want [%v, %v)", c.name, time.UnixMicro(s).In(c.t.Location()), time.UnixMicro(e).In(c.t.Location()), c.start, c.end)
		}
		if h := c.end.Sub(c.start).Hours(); h != c.hours {
			t.Errorf("%s: the window is %v hours, the case says %v", c.name, h, c.hours)
		}
		// 1µs before the end is in the window; the end starts the next.
		if _, e2 := cal.bounds(e - 1); e2 != e {
			t.Errorf("%s: 1µs before the end is in another window", c.name)
		}
		if s2, _ := cal.bounds(e); s2 != e {
			t.Errorf("%s: the end does not start the next window", c.name)
		}
	}
	for _, bad := range []Calendar{{Unit: "fortnight"}, {Unit: "day", TimeZone: "Mars/Olympus"}, {Unit: "day", TimeZone: "Local"},
		{Unit: "day", AnchorDay: 3}, {Unit: "month", AnchorDay: 32}, {Unit: "month", WeekStart: "monday"}, {Unit: "week", WeekStart: "funday"}} {
		if _, err := Compile(FixedWindow{Count: 1, Calendar: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if _, err := Compile(FixedWindow{Count: 1, Window: time.Hour, Calendar: Calendar{Unit: "day"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a window and a calendar: %v", err)
	}
}

// TestCalendarFixedWindow: a decision counts in the calendar window that
// holds it, 1ms before and after a boundary, with RetryAfter and
// ResetAfter the true time to the boundary.
func TestCalendarFixedWindow(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	p := MustCompile(FixedWindow{Count: 2, Calendar: Calendar{Unit: "day", TimeZone: "Europe/Berlin"}})
	midnight := time.Date(2027, 3, 28, 0, 0, 0, 0, berlin).UnixMicro() // a 23-hour day starts
	var s State
	before := midnight - 1000
	if r := p.Decide(&s, before, 2, true); !r.Allowed || r.ResetAfter != time.Millisecond {
		t.Fatalf("1ms before midnight: %+v", r)
	}
	if r := p.Decide(&s, before, 1, true); r.Allowed || r.RetryAfter != time.Millisecond {
		t.Fatalf("full, 1ms before midnight: %+v", r)
	}
	after := midnight + 1000
	if r := p.Decide(&s, after, 2, true); !r.Allowed || r.ResetAfter != 23*time.Hour-time.Millisecond {
		t.Fatalf("1ms after midnight, on a 23-hour day: %+v", r)
	}
	// A clock that steps back to before midnight stays in the new day.
	if r := p.Decide(&s, before, 1, true); r.Allowed || r.RetryAfter != 23*time.Hour {
		t.Fatalf("the clock back 2ms: %+v", r)
	}
}
