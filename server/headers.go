package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// The RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers, written for both APIs (HTTP
// response headers, and Envoy's response_headers_to_add). One list member
// per enforced (non-shadow) level, named by its policy pattern (plus
// "#i" for the i-th limit of a node with several):
//
//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1712
//
// q is the level's limit (what it admits at once), w the seconds it takes
// to refill q from empty (a fixed window's window; for gcra and
// token_bucket, limit × emission interval; a gate's interval), r what
// remains and t the seconds until the level is back to full (rounded up).
//
// This is a minimal encoder local to the service: package httplimit has
// its own for the middleware, to be shared once it exports one.
const (
	headerPolicy    = "RateLimit-Policy"
	headerRateLimit = "RateLimit"
)

// appendRateLimitFields appends the two field values for levels to pol and
// rl; it returns them unchanged when no level is enforced.
func appendRateLimitFields(pol, rl []byte, levels []sluice.Level) ([]byte, []byte) {
	first := true
	for i := range levels {
		l := &levels[i]
		if l.Shadow {
			continue
		}
		if !first {
			pol = append(pol, ", "...)
			rl = append(rl, ", "...)
		}
		first = false
		start := len(pol)
		pol = appendSFName(pol, l.Pattern, l.Key)
		rl = append(rl, pol[start:]...)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, l.Result.Limit, 10)
		pol = append(pol, ";w="...)
		pol = strconv.AppendInt(pol, ceilSeconds(refillTime(l.Spec, l.Result.Limit)), 10)
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, l.Result.Remaining, 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, ceilSeconds(l.Result.ResetAfter), 10)
	}
	return pol, rl
}

// appendSFName appends a structured-field string naming a level: its
// pattern, plus the "#i" of its key when the node has several limits.
// Bytes outside printable ASCII become '?'.
func appendSFName(b []byte, pattern, key string) []byte {
	b = append(b, '"')
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c > 0x7e:
				b = append(b, '?')
			default:
				b = append(b, c)
			}
		}
	}
	add(pattern)
	if j := strings.LastIndexByte(key, '#'); j >= 0 {
		add(key[j:])
	}
	return append(b, '"')
}

// refillTime is how long a limit takes to go from empty to limit.
func refillTime(s algo.Spec, limit int64) time.Duration {
	switch s.Algorithm {
	case algo.NameFixedWindow:
		return time.Duration(s.Window)
	case algo.NameGate:
		return time.Duration(s.Interval)
	case algo.NameGCRA:
		if s.Count > 0 {
			return time.Duration(s.Period) / time.Duration(s.Count) * time.Duration(limit)
		}
	case algo.NameTokenBucket:
		if s.Rate > 0 {
			return time.Duration(s.Per) / time.Duration(s.Rate) * time.Duration(limit)
		}
	}
	return 0
}

// ceilSeconds rounds a duration up to whole seconds (0 stays 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After of a denied decision: its
// RetryAfter rounded up, at least 1; ok is false when it can never be
// admitted.
func retryAfterSeconds(r algo.Result) (int64, bool) {
	if r.RetryAfter == algo.Never {
		return 0, false
	}
	return max(ceilSeconds(r.RetryAfter), 1), true
}
