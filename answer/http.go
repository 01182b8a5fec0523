package answer

// An answer's header fields: the
// RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10 (Structured Field Lists, RFC
// 9651) and Retry-After, written once here for the middleware, the
// service's HTTP answers and Envoy's response_headers_to_add alike:
//
//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1800
//
// There is one Item per enforced level of the decision, from the root
// down. The Item's String is the level's name (appendLevelName): its policy node
// pattern, with "#" and the limit's index appended when the node has
// several limits (taken from the level's key), and any byte outside
// printable ASCII, and '%', percent-encoded. The quota q is the level's
// Result.Quota, the most it admits at once, which is what r counts down
// from. The window w is the time, in whole seconds rounded up (at least
// 1), in which the level's algorithm grants q, as its algo.Limit.Quota
// says (the README's table of algorithms gives q and w of each; the
// policy takes it when it compiles the limit: policy.Level.Window), so
// q/w is the configured rate for gcra and token_bucket. For a
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

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/jsonenc"
	"github.com/sluicehq/sluice/internal/sf"
	"github.com/sluicehq/sluice/policy"
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

// maxNamed is how many level names appendDraftFields remembers from the first
// List to copy into the second; deeper levels are encoded again.
const maxNamed = 8

// appendDraftFields appends the RateLimit-Policy List of the enforced
// (non-shadow) levels, then their RateLimit List, and returns b and where
// the first ends; it appends nothing when no level is enforced. Each name
// is encoded once and copied.
func appendDraftFields(b []byte, levels []policy.Level) ([]byte, int) {
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
		if w := lv.Window(); w > 0 {
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

// appendName appends a level's name as a String.
func appendName(b []byte, lv *policy.Level) []byte {
	if plainName(lv.Pattern) {
		b = append(b, '"')
		b = append(b, lv.Pattern...)
		b = append(b, limitIndex(lv.Key)...) // '#' and digits
		return append(b, '"')
	}
	var nb [128]byte
	b, _ = sf.AppendString(b, appendLevelName(nb[:0], lv)) // printable ASCII by construction
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

// appendLevelName appends LevelName(lv) to b.
func appendLevelName(b []byte, lv *policy.Level) []byte {
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

func clampInt(v int64) int64 { return min(max(v, 0), sf.MaxInteger) }

// status is the HTTP status of a decision, the one mapping of the
// service and the middleware alike:
//
//	200  allowed
//	429  rate limited: a level denied (Retry-After: when it admits again)
//	403  denied because a path matched no policy (unmatched: deny) and no
//	     level denied, or by a deny list: not over a quota
//	503  the store failed and the answer is on_store_error: deny
func status(d *policy.Decision, storeFailed bool) int {
	switch {
	case d.Allowed:
		return http.StatusOK
	case storeFailed:
		return http.StatusServiceUnavailable
	case strings.HasPrefix(d.Listed, "deny ") || !d.Matched && policy.Denier(d.Levels) == nil:
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}

// The header fields an answer may carry, with their names canonical for
// an http.Header map, so that the hot path assigns map entries without
// canonicalizing.
const (
	fieldPolicy = iota
	fieldRateLimit
	fieldLimit
	fieldRemaining
	fieldReset
	fieldRetryAfter
)

var canonicalNames = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// fields are the header fields of an answer: n of them, field kind[i]
// with its value s[start of i : ends[i]], all in one string.
type fields struct {
	s    string
	kind [6]int
	ends [6]int
	n    int
}

// value is the i-th field's value.
func (f *fields) value(i int) string {
	start := 0
	if i > 0 {
		start = f.ends[i-1]
	}
	return f.s[start:f.ends[i]]
}

// makeFields writes the header fields of c's answer, the one writer of
// them: when a level is enforced and the store answered, the draft's
// RateLimit-Policy and RateLimit (draft) and the older X-RateLimit-Limit,
// -Remaining and -Reset (legacy: the summary's quota, remaining, and
// seconds until it is full, or until Retry-After when denied); and
// Retry-After for a 429 or 503 whose retry time is known (none when the
// cost can never be admitted). Every value is built in one buffer that
// becomes one string.
func makeFields(c *Call, draft, legacy bool) fields {
	var f fields
	var buf [512]byte
	b := buf[:0]
	d := &c.Decision
	add := func(kind int) {
		f.kind[f.n], f.ends[f.n] = kind, len(b)
		f.n++
	}
	if !c.Failed && slices.ContainsFunc(d.Levels, func(l policy.Level) bool { return !l.Shadow }) {
		if draft {
			var end int
			b, end = appendDraftFields(b, d.Levels)
			f.kind[0], f.ends[0], f.n = fieldPolicy, end, 1
			add(fieldRateLimit)
		}
		if legacy {
			sum := d.Summary
			b = strconv.AppendInt(b, sum.Quota, 10)
			add(fieldLimit)
			b = strconv.AppendInt(b, max(sum.Remaining, 0), 10)
			add(fieldRemaining)
			reset := ceilSeconds(sum.ResetAfter)
			if !d.Allowed && sum.RetryAfter > 0 {
				reset = retrySeconds(sum.RetryAfter)
			}
			b = strconv.AppendInt(b, reset, 10)
			add(fieldReset)
		}
	}
	if (c.Status == http.StatusTooManyRequests || c.Status == http.StatusServiceUnavailable) && d.Summary.RetryAfter > 0 {
		b = strconv.AppendInt(b, retrySeconds(d.Summary.RetryAfter), 10)
		add(fieldRetryAfter)
	}
	if f.n > 0 {
		f.s = string(b)
	}
	return f
}

// SetHeader sets on h the header fields of c's answer (makeFields), with
// the draft's fields, the legacy ones, or both.
func (c *Call) SetHeader(h http.Header, draft, legacy bool) {
	f := makeFields(c, draft, legacy)
	if f.n == 0 {
		return
	}
	if c.own == nil {
		c.own = new(owned)
	}
	vals := &c.own.vals
	for i := 0; i < f.n; i++ {
		vals[i] = f.value(i)
		h[canonicalNames[f.kind[i]]] = vals[i : i+1 : i+1]
	}
}

// WriteProblem answers with an RFC 9457 problem details body
// (application/problem+json): for a denial d, its own (writeDenied);
// else (d nil) an about:blank problem of status saying detail.
func WriteProblem(w http.ResponseWriter, status int, detail string, d *policy.Decision) {
	if d != nil {
		writeDenied(w, d)
		return
	}
	writeProblem(w, status, "", "", detail, nil)
}

// writeProblem answers status with a problem details body of the given
// type, title and detail; ext, if set, appends extension members, each
// starting with a comma. An empty typ is "about:blank" and an empty title
// is the status text.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, ext func([]byte) []byte) {
	if typ == "" {
		typ = "about:blank"
	}
	if title == "" {
		title = http.StatusText(status)
	}
	b := make([]byte, 0, 256+len(detail))
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, typ)
	b = append(b, `,"title":`...)
	b = jsonenc.AppendString(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	b = jsonenc.AppendString(b, detail)
	if ext != nil {
		b = ext(b)
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	w.Write(b)
}

// quotaExceededType is the problem type URI of draft-ietf-httpapi-
// ratelimit-headers-10 §5.1, "quota-exceeded" (httplimit.QuotaExceededType),
// and quotaExceededTitle the title the draft gives it.
const (
	quotaExceededType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Request cannot be satisfied as assigned quota has been exceeded"
)

// writeDenied answers a denial with its problem+json body: 403 with an
// about:blank problem for a request denied because it matched no policy
// (unmatched: deny) by no level; else 429 of the draft's quota-exceeded
// type, whose violated-policies names the enforced levels that denied,
// limit the quota of the one that holds the request back longest, and
// retry_after equals Retry-After (left out when the cost can never be
// admitted, or the retry time is unknown). httplimit.QuotaExceeded
// documents the body.
func writeDenied(w http.ResponseWriter, d *policy.Decision) {
	if status(d, false) == http.StatusForbidden {
		writeProblem(w, http.StatusForbidden, "about:blank", "Forbidden",
			"The request matches no rate-limit policy, and requests that match none are denied.", nil)
		return
	}
	binding := policy.Denier(d.Levels)
	ext := func(b []byte) []byte {
		b = append(b, `,"violated-policies":[`...)
		first := true
		for i := range d.Levels {
			lv := &d.Levels[i]
			if lv.Shadow || lv.Result.Allowed {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			var nb [128]byte
			b = jsonenc.AppendString(b, appendLevelName(nb[:0], lv))
		}
		b = append(b, ']')
		if binding != nil && binding.Result.Quota > 0 {
			b = append(b, `,"limit":`...)
			b = strconv.AppendInt(b, binding.Result.Quota, 10)
		}
		if d.Summary.RetryAfter > 0 {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, retrySeconds(d.Summary.RetryAfter), 10)
		}
		return b
	}
	var detail []byte
	switch {
	case d.Summary.RetryAfter == algo.Never:
		detail = append(detail, "The request exceeds the limit"...)
		if binding != nil {
			detail = append(detail, " of "...)
			var nb [128]byte
			detail = append(detail, appendLevelName(nb[:0], binding)...)
		}
		detail = append(detail, " and can never be admitted."...)
	case d.Summary.RetryAfter == 0: // unknown (a script that sends no Retry-After)
		detail = append(detail, "Quota exceeded."...)
	default:
		detail = append(detail, "Quota exceeded: retry in "...)
		s := retrySeconds(d.Summary.RetryAfter)
		detail = strconv.AppendInt(detail, s, 10)
		if s == 1 {
			detail = append(detail, " second."...)
		} else {
			detail = append(detail, " seconds."...)
		}
	}
	writeProblem(w, http.StatusTooManyRequests, quotaExceededType, quotaExceededTitle, string(detail), ext)
}
