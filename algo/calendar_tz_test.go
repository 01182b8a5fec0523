package algo

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCalendarTZDatabase holds calendar windows to their rule (a window
// starts at the first instant whose wall clock shows its first date or a
// later one) in every zone of the tz database, checked against Go's time
// itself: at every transition from 1900 to 2040 that moves, repeats or
// skips a midnight (or comes within an hour of one), with the day, week
// (starting on the date's weekday), month (anchored on its day) and year
// that start there; and at random instants, calendars and transitions of
// every zone. Each window holds its instant, meets the windows before and
// after it with no gap or overlap, and starts and ends where the
// reference, which reads wall clocks (In(loc).Date()) and nothing of the
// code under test, says. The seed is fixed (SLUICE_SEED to explore).
func TestCalendarTZDatabase(t *testing.T) {
	zones := tzZones(t)
	seed := uint64(54)
	if v, err := strconv.ParseUint(os.Getenv("SLUICE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("%d zones, seed %d", len(zones), seed)
	r := rand.New(rand.NewPCG(seed, 54))
	// Transitions from lo to hi, random instants from lo to far.
	lo, hi, far := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	cases, edges := 0, 0 // cases checked, transitions at a midnight
	for _, z := range zones {
		zone := z.name
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatalf("%s: %v", zone, err)
		}
		check := func(c Calendar, at int64) {
			t.Helper()
			cases++
			checkCalendarWindow(t, loc, c, at)
		}
		// Every transition of the span; at each that skips or repeats a
		// midnight, the windows that start at that midnight, on either
		// side of it (once for a zone's aliases).
		var all []int64
		for at := lo; ; {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(hi) {
				break
			}
			x := end.UnixMicro()
			all = append(all, x)
			if d, ok := jumpsMidnight(loc, x); ok && !z.alias {
				edges++
				cals := []Calendar{
					{Unit: "day", TimeZone: zone},
					{Unit: "week", TimeZone: zone, WeekStart: strings.ToLower(d.Weekday().String())},
					{Unit: "month", TimeZone: zone, AnchorDay: d.Day()},
				}
				if d.Month() == 1 && d.Day() == 1 {
					cals = append(cals, Calendar{Unit: "year", TimeZone: zone})
				}
				for _, c := range cals {
					check(c, x-1)
					check(c, x)
				}
			}
			at = end
		}
		// Random calendars at random instants, and at random transitions.
		for range 4 {
			check(randomCalendar(r, zone), lo.UnixMicro()+r.Int64N(far.Sub(lo).Microseconds()))
		}
		for range 2 {
			if len(all) > 0 {
				check(randomCalendar(r, zone), all[r.IntN(len(all))]+r.Int64N(3)-1)
			}
		}
	}
	t.Logf("%d cases, %d transitions that skip or repeat a midnight", cases, edges)
}

// randomCalendar returns a calendar of any unit, week start and anchor day
// in zone.
func randomCalendar(r *rand.Rand, zone string) Calendar {
	c := Calendar{Unit: []string{"day", "week", "month", "year"}[r.IntN(4)], TimeZone: zone}
	switch c.Unit {
	case "week":
		if r.IntN(4) > 0 {
			c.WeekStart = strings.ToLower(time.Weekday(r.IntN(7)).String())
		}
	case "month":
		c.AnchorDay = r.IntN(32)
	}
	return c
}

// checkCalendarWindow checks the window of c that holds at, computed (not
// the one bounds found last), against the reference (refWindow) and the
// windows before and after it.
func checkCalendarWindow(t *testing.T, loc *time.Location, c Calendar, at int64) {
	t.Helper()
	cal, err := c.compile()
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	show := func(us int64) string { return time.UnixMicro(us).In(loc).Format("2006-01-02 15:04:05.999999 -0700") }
	s, e := cal.window(at)
	where := func() string {
		return c.Unit + " " + c.TimeZone + " " + c.WeekStart + " " + strconv.Itoa(c.AnchorDay) + " at " + show(at)
	}
	if !(s <= at && at < e) {
		t.Fatalf("%s: the window [%s, %s) does not hold it", where(), show(s), show(e))
	}
	ws, we := refWindow(loc, c, at)
	if s != ws || e != we {
		t.Fatalf("%s: the window is [%s, %s), the rule's [%s, %s)", where(), show(s), show(e), show(ws), show(we))
	}
	if s2, e2 := cal.window(e - 1); s2 != s || e2 != e {
		t.Fatalf("%s: 1µs before the end is in [%s, %s)", where(), show(s2), show(e2))
	}
	if s2, _ := cal.window(e); s2 != e {
		t.Fatalf("%s: the next window starts at %s, not at the end %s", where(), show(s2), show(e))
	}
	if _, e2 := cal.window(s - 1); e2 != s {
		t.Fatalf("%s: the window before ends at %s, not at the start %s", where(), show(e2), show(s))
	}
	fw := FixedWindow{Count: 1, Calendar: c}
	if fw.WindowEnd(at) != e || fw.WindowStart(e) != s {
		t.Fatalf("%s: WindowEnd %s, WindowStart %s", where(), show(fw.WindowEnd(at)), show(fw.WindowStart(e)))
	}
}

// refWindow is the rule, computed from wall clocks: the window holding at
// starts on the last of c's first dates (every date, the week start's
// weekdays, the anchor days, January 1sts) whose start (refStart) is at or
// before at, and ends at the next one's.
func refWindow(loc *time.Location, c Calendar, at int64) (int64, int64) {
	w := time.UnixMicro(at).In(loc)
	date := time.Date(w.Year(), w.Month(), w.Day(), 0, 0, 0, 0, time.UTC)
	first := func(d time.Time) bool { // d is a window's first date
		switch c.Unit {
		case "week":
			ws := time.Monday
			for wd := range 7 {
				if strings.EqualFold(time.Weekday(wd).String(), c.WeekStart) {
					ws = time.Weekday(wd)
				}
			}
			return d.Weekday() == ws
		case "month":
			a := max(c.AnchorDay, 1)
			last := d.AddDate(0, 1, -d.Day()).Day() // the month's last day
			return d.Day() == min(a, last)
		case "year":
			return d.Month() == 1 && d.Day() == 1
		}
		return true
	}
	p := date
	for !first(p) {
		p = p.AddDate(0, 0, -1)
	}
	next := func(d time.Time) time.Time {
		for d = d.AddDate(0, 0, 1); !first(d); d = d.AddDate(0, 0, 1) {
		}
		return d
	}
	// The wall clock's date may have been left before (the clock went
	// back over a midnight), or not begun (its start is the next's).
	for refStart(loc, p) > at {
		for p = p.AddDate(0, 0, -1); !first(p); p = p.AddDate(0, 0, -1) {
		}
	}
	for refStart(loc, next(p)) <= at {
		p = next(p)
	}
	return refStart(loc, p), refStart(loc, next(p))
}

// refStart returns the first instant (µs) whose wall clock in loc shows
// the date d (at 00:00 UTC) or a later one. Between two transitions the
// wall clock runs forward, so that over each such span it is found by
// bisection, reading the wall clock's date; the first over the spans of
// the 30 hours either side of d's 00:00 UTC (no zone is that far from
// UTC) is the start.
func refStart(loc *time.Location, d time.Time) int64 {
	shows := func(us int64) bool { return !wallDate(time.UnixMicro(us).In(loc)).Before(d) }
	from, to := d.Add(-30*time.Hour).UnixMicro(), d.Add(30*time.Hour).UnixMicro()
	if shows(from) {
		panic("refStart: " + d.String() + " shown 30 hours before its 00:00 UTC in " + loc.String())
	}
	for a := from; a < to; {
		_, end := time.UnixMicro(a).In(loc).ZoneBounds()
		b := to
		if !end.IsZero() && end.UnixMicro() <= a {
			b = a + time.Hour.Microseconds() // golang/go#81583: an end before the instant, months before the next transition
		} else if !end.IsZero() && end.UnixMicro() < to {
			b = end.UnixMicro()
		}
		if shows(b - 1) {
			// The first instant of [a, b) that shows d or later.
			lo, hi := a, b-1
			for lo < hi {
				mid := lo + (hi-lo)/2
				if shows(mid) {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			return lo
		}
		a = b
	}
	panic("refStart: " + d.String() + " not shown within 30 hours of its 00:00 UTC in " + loc.String())
}

// jumpsMidnight reports whether the wall clock's jump at the transition x
// skips or repeats a 00:00 (whether the wall times [lo, hi) between the
// readings at x of the offsets before and after it hold one), and that
// midnight's date.
func jumpsMidnight(loc *time.Location, x int64) (time.Time, bool) {
	_, from := time.UnixMicro(x - 1).In(loc).Zone()
	_, to := time.UnixMicro(x).In(loc).Zone()
	lo, hi := time.UnixMicro(x).Add(time.Duration(from)*time.Second).UTC(), time.UnixMicro(x).Add(time.Duration(to)*time.Second).UTC()
	if hi.Before(lo) {
		lo, hi = hi, lo
	}
	switch {
	case !lo.Before(hi):
		return time.Time{}, false
	case lo.Equal(wallDate(lo)):
		return lo, true
	case !sameDate(lo, hi.Add(-time.Microsecond)):
		return wallDate(hi.Add(-time.Microsecond)), true
	}
	return time.Time{}, false
}

func wallDate(w time.Time) time.Time {
	return time.Date(w.Year(), w.Month(), w.Day(), 0, 0, 0, 0, time.UTC)
}

func sameDate(a, b time.Time) bool { return wallDate(a).Equal(wallDate(b)) }

// tzZones lists the zones of the tz database on this machine
// (/usr/share/zoneinfo, or $ZONEINFO), and those of the copy Go embeds
// (time/tzdata's, GOROOT's lib/time/zoneinfo.zip) when it is there: every
// name time.LoadLocation knows. A link (US/Eastern, which is
// America/New_York's data) is an alias.
func tzZones(t *testing.T) []tzZone {
	t.Helper()
	data := map[string]string{} // name: its TZif data
	dir := os.Getenv("ZONEINFO")
	if dir == "" || strings.HasSuffix(dir, ".zip") {
		dir = "/usr/share/zoneinfo"
	}
	filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name, _ := filepath.Rel(dir, path)
		if e.IsDir() && (name == "posix" || name == "right") {
			return fs.SkipDir // copies: with POSIX names, with leap seconds
		}
		if e.IsDir() || name == "localtime" {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.HasPrefix(b, []byte("TZif")) {
			data[name] = string(b)
		}
		return nil
	})
	if z, err := zip.OpenReader(filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip")); err == nil {
		for _, f := range z.File {
			if _, ok := data[f.Name]; ok {
				continue // time.LoadLocation reads the machine's
			}
			if rc, err := f.Open(); err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				data[f.Name] = string(b)
			}
		}
		z.Close()
	}
	if len(data) < 300 {
		t.Fatalf("%d zones found in %s and GOROOT's zoneinfo.zip: the tz database is missing", len(data), dir)
	}
	var zones []tzZone
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(data)) {
		zones = append(zones, tzZone{name, seen[data[name]]})
		seen[data[name]] = true
	}
	return zones
}

// A tzZone is a name of the tz database, and whether it is an alias of
// an earlier one: the same data.
type tzZone struct {
	name  string
	alias bool
}
