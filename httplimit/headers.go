package httplimit

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/headers"
	"github.com/sluicehq/sluice/policy"
)

// HeaderStyle selects the rate-limit headers a Middleware sends.
type HeaderStyle int

const (
	// DraftHeaders are the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-10, one Item per enforced
	// level, as package headers encodes them (the service sends the same):
	//
	//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
	//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1800
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
func (l *Middleware) setHeaders(h http.Header, d *policy.Decision, vals *[4]string) {
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
