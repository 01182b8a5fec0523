// Package headers encodes rate-limit decisions as HTTP header fields: the
// RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10 (Structured Field Lists, RFC
// 9651) and Retry-After. The middleware (package httplimit) and the
// service (package server, for HTTP answers and Envoy's
// response_headers_to_add) both write them with this package, so that
// they agree:
//
//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1800
//
// There is one Item per enforced level of the decision, from the root
// down. The Item's String is the level's name (AppendLevelName): its policy node
// pattern, with "#" and the limit's index appended when the node has
// several limits (taken from the level's key), and any byte outside
// printable ASCII, and '%', percent-encoded. The quota q is the level's
// Result.Quota, the most it admits at once, which is what r counts down
// from. The window w is the time, in whole seconds rounded up (at least
// 1), in which the level's algorithm grants q, as its algo.Limit.Quota
// says (the README's table of algorithms gives q and w of each), so q/w is
// the configured rate for gcra and token_bucket. For a
// concurrency limit q counts slots: r is the slots free, and t for a
// level that denied is when the earliest hold ends (a holder may release
// sooner). A level has one
// Result, so a spec with several windows is one Item, for its tightest
// limit (r is still the least remaining over all of its windows). A level
// with no algo.Limit (a user script's) has no w.
//
// r is the level's Remaining. t is, for a level that allowed the request,
// the seconds until it is back to full (its ResetAfter: for a level with
// several windows, that can be the longest window, beyond w; a
// conservative "additional quota by then"), and for a level that denied
// it, the seconds until it admits the request (its RetryAfter; its
// ResetAfter when the cost can never fit), rounded up, so that Retry-After
// is never earlier than the t of a denying level.
//
// Shadow levels are left out of both fields: they are not enforced, and a
// client that paced itself by them would throttle itself for nothing. The
// partition key pk is not sent either: it would echo the caller's key,
// which may be a secret such as an API key.
package headers

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/sf"
	"github.com/sluicehq/sluice/policy"
)

// Field names, as the draft spells them.
const (
	Policy    = "RateLimit-Policy"
	RateLimit = "RateLimit"
)

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
// the first ends; it appends nothing when no level is enforced. Each name
// is encoded once and copied.
func AppendDraftFields(b []byte, levels []policy.Level) ([]byte, int) {
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
		b = strconv.AppendInt(b, clampInt(lv.Result.Quota), 10)
		if w := levelWindow(lv); w > 0 {
			b = append(b, paramW...)
			b = strconv.AppendInt(b, clampInt(max(CeilSeconds(w), 1)), 10)
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
		return CeilSeconds(r.ResetAfter)
	}
	return RetrySeconds(r.RetryAfter)
}

// appendName appends a level's name as a String.
func appendName(b []byte, lv *policy.Level) []byte {
	if plainName(lv.Pattern) {
		b = append(b, '"')
		b = append(b, lv.Pattern...)
		b = append(b, limitIndex(lv.Key)...) // '#' and digits
		return append(b, '"')
	}
	var nb [128]byte
	b, _ = sf.AppendString(b, AppendLevelName(nb[:0], lv)) // printable ASCII by construction
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

// AppendLevelName appends LevelName(lv) to b.
func AppendLevelName(b []byte, lv *policy.Level) []byte {
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

// levelWindow returns the time in which a level's limit grants its quota
// (see Limit.Quota), or 0 when the level has no algo.Limit.
func levelWindow(lv *policy.Level) time.Duration {
	if lv.Limit == nil {
		return 0
	}
	_, w := algo.Quota(lv.Limit)
	return w
}

// CeilSeconds rounds d up to whole seconds; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetrySeconds is a Retry-After: d rounded up to whole seconds, at least 1.
func RetrySeconds(d time.Duration) int64 { return max(CeilSeconds(d), 1) }

// RetryAfterSeconds is the Retry-After of a denied result: its RetryAfter
// rounded up to whole seconds, at least 1; ok is false when the cost can
// never be admitted (Never), where no Retry-After is sent.
func RetryAfterSeconds(r algo.Result) (secs int64, ok bool) {
	if r.RetryAfter <= 0 {
		return 0, false
	}
	return RetrySeconds(r.RetryAfter), true
}

func clampInt(v int64) int64 { return min(max(v, 0), sf.MaxInteger) }
