package server

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
)

// The RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers, written for both APIs (HTTP
// response headers, and Envoy's response_headers_to_add), by the rules of
// httplimit.DraftHeaders so that the service and the middleware agree: one
// list member per enforced (non-shadow) level, named by
// httplimit.LevelName (its policy pattern, plus "#i" for the i-th limit
// of a node with several):
//
//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1712
//
// q is the level's limit (what it admits at once), w the seconds in which
// the algorithm grants q (at least 1; left out when unknown), r what
// remains, t the seconds until the level is back to full when it allowed
// the request and until it admits it when it denied it (rounded up).
//
// This is a minimal encoder local to the service, because package
// httplimit does not export its own yet (appendDraft): to be replaced by
// it once it does.
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
		pol = appendSFString(pol, httplimit.LevelName(l))
		rl = append(rl, pol[start:]...)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, l.Result.Limit, 10)
		if w := refillTime(l.Spec, l.Result.Limit); w > 0 {
			pol = append(pol, ";w="...)
			pol = strconv.AppendInt(pol, max(ceilSeconds(w), 1), 10)
		}
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, max(l.Result.Remaining, 0), 10)
		rl = append(rl, ";t="...)
		t := l.Result.ResetAfter
		if !l.Result.Allowed && l.Result.RetryAfter > 0 {
			t = l.Result.RetryAfter
		}
		rl = strconv.AppendInt(rl, ceilSeconds(t), 10)
	}
	return pol, rl
}

// appendSFString appends s as a structured-field String (s is printable
// ASCII, as LevelName makes it).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\', c)
		} else {
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// refillTime is the time in which a limit grants limit (see
// httplimit.DraftHeaders), 0 when unknown.
func refillTime(s algo.Spec, limit int64) time.Duration {
	switch s.Algorithm {
	case algo.NameFixedWindow:
		return time.Duration(s.Window)
	case algo.NameGate:
		return time.Duration(s.Interval)
	case algo.NameGCRA:
		if s.Count > 0 {
			return time.Duration(algo.Micros(time.Duration(s.Period))/s.Count*(s.Burst+1)) * time.Microsecond
		}
	case algo.NameTokenBucket:
		if s.Rate > 0 {
			return time.Duration(algo.Micros(time.Duration(s.Per))/s.Rate*s.Burst) * time.Microsecond
		}
	default:
		for _, w := range s.Limits {
			if w.Limit == limit {
				return time.Duration(w.Window)
			}
		}
		if len(s.Limits) > 0 {
			return time.Duration(s.Limits[0].Window)
		}
		if s.Window > 0 {
			return time.Duration(s.Window)
		}
		return time.Duration(s.MinGap)
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
