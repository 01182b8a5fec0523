package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit/internal/sf"
)

// HeaderStyle selects the rate-limit headers a Limiter sends.
type HeaderStyle int

const (
	// DraftHeaders are the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-10 (the same syntax as -09):
	// Structured Field Lists with one Item per enforced level of the
	// decision, from the root down:
	//
	//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
	//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1800
	//
	// The Item's String is the level's name: its policy node pattern, with
	// "#" and the limit's index appended when the node has several limits
	// (taken from the level's key), and any byte outside printable ASCII,
	// and '%', percent-encoded. The quota q is the level's Limit, the most
	// it admits at once, which is what r counts down from. The window w is
	// the time, in whole seconds rounded up (at least 1), in which the
	// algorithm grants q:
	//
	//	gcra            q = burst+1        w = (burst+1)·period/count
	//	token_bucket    q = burst          w = burst·per/rate
	//	fixed_window    q = limit          w = window
	//	gate            q = 1              w = interval
	//	sliding_log,    q = the smallest   w = that limit's window
	//	window_counter      of limits
	//
	// so q/w is the configured rate for gcra and token_bucket. A
	// sliding_log with only min_gap has w = min_gap. A level has one Result,
	// so a spec with several windows is one Item, for its tightest limit
	// (r is still the least remaining over all of its windows). For other
	// algorithms w comes from the spec's serialized fields: window; else
	// the window of the entry of limits whose limit is q (or the first);
	// else interval or min_gap; else w is left out.
	//
	// r is the level's Remaining. t is, for a level that allowed the
	// request, the seconds until it is back to full (its ResetAfter: for a
	// level with several windows, that can be the longest window, beyond
	// w; a conservative "additional quota by then"), and
	// for a level that denied it, the seconds until it admits the request
	// (its RetryAfter; its ResetAfter when the cost can never fit), rounded
	// up, so that Retry-After is never earlier than the t of a denying
	// level.
	//
	// Shadow levels are left out of both fields: they are not enforced, and
	// a client that paced itself by them would throttle itself for nothing.
	// The partition key pk is not sent either: it would echo the caller's
	// key, which may be a secret such as an API key.
	DraftHeaders HeaderStyle = iota
	// LegacyHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, from the decision's Summary (the enforced level
	// with the least remaining): Reset is the seconds until the limiter is
	// back to full when allowed, and the same as Retry-After when denied
	// (its ResetAfter when the cost can never fit).
	LegacyHeaders
	// NoHeaders sends no rate-limit headers; denials still get Retry-After.
	NoHeaders
)

// Canonical header names, so that the hot path assigns map entries
// without canonicalizing.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrLimit      = "X-Ratelimit-Limit"
	hdrRemaining  = "X-Ratelimit-Remaining"
	hdrReset      = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// setHeaders sets the rate-limit headers of d, and Retry-After when d is
// denied, building every value in one buffer that becomes one string:
// one allocation, plus the header map's own growth. vals backs the header
// slices.
func (l *Limiter) setHeaders(h http.Header, d *sluice.Decision, vals *[4]string) {
	var buf [512]byte
	b := buf[:0]
	var ends [4]int
	var names [4]string
	n := 0
	enforced := false
	for i := range d.Levels {
		if !d.Levels[i].Shadow {
			enforced = true
			break
		}
	}
	if enforced {
		switch l.opts.Headers {
		case DraftHeaders:
			var policyEnd int
			b, policyEnd = AppendDraftFields(b, d.Levels)
			ends[n], names[n] = policyEnd, hdrPolicy
			n++
			ends[n], names[n] = len(b), hdrRateLimit
			n++
		case LegacyHeaders:
			s := d.Summary
			b = strconv.AppendInt(b, s.Limit, 10)
			ends[n], names[n] = len(b), hdrLimit
			n++
			b = strconv.AppendInt(b, max(s.Remaining, 0), 10)
			ends[n], names[n] = len(b), hdrRemaining
			n++
			reset := ceilSeconds(s.ResetAfter)
			if !d.Allowed && s.RetryAfter > 0 {
				reset = retrySeconds(s.RetryAfter)
			}
			b = strconv.AppendInt(b, reset, 10)
			ends[n], names[n] = len(b), hdrReset
			n++
		}
	}
	if !d.Allowed && d.Summary.RetryAfter > 0 {
		b = strconv.AppendInt(b, retrySeconds(d.Summary.RetryAfter), 10)
		ends[n], names[n] = len(b), hdrRetryAfter
		n++
	}
	if n == 0 {
		return
	}
	s := string(b)
	start := 0
	for i := 0; i < n; i++ {
		vals[i] = s[start:ends[i]]
		h[names[i]] = vals[i : i+1 : i+1]
		start = ends[i]
	}
}

// Parameters with their keys, checked once against RFC 9651's key syntax
// so that the hot path can append them as they are.
var (
	paramQ = param("q")
	paramW = param("w")
	paramR = param("r")
	paramT = param("t")
)

func param(key string) string {
	if err := sf.ValidKey(key); err != nil {
		panic(err)
	}
	return ";" + key + "="
}

// maxNamed is how many level names AppendDraftFields remembers from the first
// List to copy into the second; deeper levels are encoded again.
const maxNamed = 8

// AppendDraftFields appends the RateLimit-Policy List of the enforced
// (non-shadow) levels, then their RateLimit List, and returns b and where
// the first ends; it appends nothing when no level is enforced. It is the
// encoding of DraftHeaders, exported so that other front ends (sluice
// serve's HTTP and gRPC answers) send the same fields. Each name is
// encoded once and copied.
func AppendDraftFields(b []byte, levels []sluice.Level) ([]byte, int) {
	var names [maxNamed][2]int
	n := 0
	for i := range levels {
		lv := &levels[i]
		if lv.Shadow {
			continue
		}
		if n > 0 {
			b = append(b, ", "...)
		}
		start := len(b)
		b = appendName(b, lv)
		if n < maxNamed {
			names[n] = [2]int{start, len(b)}
		}
		n++
		b = append(b, paramQ...)
		b = strconv.AppendInt(b, clampInt(lv.Result.Limit), 10)
		if w := window(lv.Spec, lv.Result.Limit); w > 0 {
			b = append(b, paramW...)
			b = strconv.AppendInt(b, clampInt(max(ceilSeconds(w), 1)), 10)
		}
	}
	policyEnd := len(b)
	n = 0
	for i := range levels {
		lv := &levels[i]
		if lv.Shadow {
			continue
		}
		if n > 0 {
			b = append(b, ", "...)
		}
		if n < maxNamed {
			b = append(b, b[names[n][0]:names[n][1]]...)
		} else {
			b = appendName(b, lv)
		}
		n++
		b = append(b, paramR...)
		b = strconv.AppendInt(b, clampInt(lv.Result.Remaining), 10)
		b = append(b, paramT...)
		b = strconv.AppendInt(b, clampInt(levelReset(lv.Result)), 10)
	}
	return b, policyEnd
}

// levelReset is a level's t: seconds until it is full again when it
// allowed the request, or until it admits the request when it denied it.
func levelReset(r algo.Result) int64 {
	if r.Allowed || r.RetryAfter <= 0 { // Never, or unknown
		return ceilSeconds(r.ResetAfter)
	}
	return retrySeconds(r.RetryAfter)
}

// LevelName returns the name a level goes by in the RateLimit fields and
// in problem details: see DraftHeaders.
func LevelName(lv *sluice.Level) string {
	var nb [128]byte
	return string(appendRawName(nb[:0], lv))
}

// appendName appends a level's name as a String.
func appendName(b []byte, lv *sluice.Level) []byte {
	if plainName(lv.Pattern) {
		b = append(b, '"')
		b = append(b, lv.Pattern...)
		b = append(b, limitIndex(lv.Key)...) // '#' and digits
		return append(b, '"')
	}
	var nb [128]byte
	b, _ = sf.AppendString(b, appendRawName(nb[:0], lv)) // printable ASCII by construction
	return b
}

// plainName reports whether a pattern goes into a String as it is: no
// byte to percent-encode and none to escape.
func plainName(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c > 0x7e || c == '%' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendRawName appends a level's name: its pattern with bytes outside
// printable ASCII, and '%', percent-encoded, and its limit index.
func appendRawName(b []byte, lv *sluice.Level) []byte {
	for i := 0; i < len(lv.Pattern); i++ {
		c := lv.Pattern[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			const hex = "0123456789ABCDEF"
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return append(b, limitIndex(lv.Key)...)
}

// limitIndex returns the "#i" that ends the key of a node's limit when the
// node has several (sluice.Key escapes '#' inside segments), or "".
func limitIndex(key string) string {
	i := strings.LastIndexByte(key, '#')
	if i < 0 || i == len(key)-1 {
		return ""
	}
	for j := i + 1; j < len(key); j++ {
		if key[j] < '0' || key[j] > '9' {
			return ""
		}
	}
	return key[i:]
}

// window returns the time in which a level's algorithm grants its quota
// (see DraftHeaders), or 0 when it is unknown.
func window(s algo.Spec, limit int64) time.Duration {
	switch s.Algorithm {
	case algo.NameGCRA:
		if s.Count <= 0 {
			return 0
		}
		t := algo.Micros(time.Duration(s.Period)) / s.Count
		return time.Duration(t*(s.Burst+1)) * time.Microsecond
	case algo.NameTokenBucket:
		if s.Rate <= 0 {
			return 0
		}
		t := algo.Micros(time.Duration(s.Per)) / s.Rate
		return time.Duration(t*s.Burst) * time.Microsecond
	case algo.NameFixedWindow:
		return time.Duration(s.Window)
	case algo.NameGate:
		return time.Duration(s.Interval)
	case algo.NameSlidingLog, algo.NameWindowCounter:
		for _, l := range s.Limits {
			if l.Limit == limit {
				return time.Duration(l.Window)
			}
		}
		if len(s.Limits) > 0 {
			return time.Duration(s.Limits[0].Window)
		}
		return time.Duration(s.MinGap)
	}
	return genericWindow(s, limit)
}

// genericWindow reads the window of an algorithm this package does not
// know by name from the spec's serialized fields. It costs a JSON round
// trip, so algorithms in wide use belong in window's switch.
func genericWindow(s algo.Spec, limit int64) time.Duration {
	raw, err := json.Marshal(s)
	if err != nil {
		return 0
	}
	var f struct {
		Window   algo.Duration `json:"window"`
		Interval algo.Duration `json:"interval"`
		MinGap   algo.Duration `json:"min_gap"`
		Limits   []struct {
			Limit  int64         `json:"limit"`
			Window algo.Duration `json:"window"`
		} `json:"limits"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return 0
	}
	switch {
	case f.Window > 0:
		return time.Duration(f.Window)
	case len(f.Limits) > 0:
		for _, e := range f.Limits {
			if e.Limit == limit {
				return time.Duration(e.Window)
			}
		}
		return time.Duration(f.Limits[0].Window)
	case f.Interval > 0:
		return time.Duration(f.Interval)
	}
	return time.Duration(f.MinGap)
}

// ceilSeconds rounds d up to whole seconds; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retrySeconds is a Retry-After: d rounded up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// RetryAfterSeconds is the Retry-After of a denied result: its RetryAfter
// rounded up to whole seconds, at least 1; ok is false when the cost can
// never be admitted (Never), where no Retry-After is sent.
func RetryAfterSeconds(r algo.Result) (secs int64, ok bool) {
	if r.RetryAfter <= 0 {
		return 0, false
	}
	return retrySeconds(r.RetryAfter), true
}

func clampInt(v int64) int64 { return min(max(v, 0), sf.MaxInteger) }

func itoa(v int) string { return strconv.Itoa(v) }
