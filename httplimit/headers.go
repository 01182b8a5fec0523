package httplimit

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/headers"
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
			b, policyEnd = headers.AppendDraftFields(b, d.Levels)
			ends[n], names[n] = policyEnd, hdrPolicy
			n++
			ends[n], names[n] = len(b), hdrRateLimit
			n++
		case LegacyHeaders:
			s := d.Summary
			b = strconv.AppendInt(b, s.Quota, 10)
			ends[n], names[n] = len(b), hdrLimit
			n++
			b = strconv.AppendInt(b, max(s.Remaining, 0), 10)
			ends[n], names[n] = len(b), hdrRemaining
			n++
			reset := headers.CeilSeconds(s.ResetAfter)
			if !d.Allowed && s.RetryAfter > 0 {
				reset = headers.RetrySeconds(s.RetryAfter)
			}
			b = strconv.AppendInt(b, reset, 10)
			ends[n], names[n] = len(b), hdrReset
			n++
		}
	}
	if !d.Allowed && d.Summary.RetryAfter > 0 {
		b = strconv.AppendInt(b, headers.RetrySeconds(d.Summary.RetryAfter), 10)
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

func itoa(v int) string { return strconv.Itoa(v) }
