package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/internal/jsonenc"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"net/http"
)

// AppendDecisionJSON appends a hierarchical decision as JSON to b: the
// body of POST /v1/check (and of the admin state endpoint), and one output
// line of `sluice replay --policy`. It is the summary of policy.Summarize
// in the shape of CL.THROTTLE's reply, plus every level the request hit:
//
//	{"allowed": false, "limit": 16, "remaining": 0, "retry_after_ns": 1999000000,
//	 "reset_after_ns": 31999000000, "matched": true, "levels": [
//	   {"pattern": "user/*", "key": "user:alex", "spec": {"algorithm": "gcra", "burst": 15, "count": 30, "period": "1m0s"},
//	    "shadow": false, "allowed": false, "limit": 16, "remaining": 0,
//	    "retry_after_ns": 1999000000, "reset_after_ns": 31999000000}]}
//
// Durations are integer nanoseconds; retry_after_ns is 0 when allowed and -1
// when the cost can never be admitted (it exceeds a limit, or the request
// matched nothing under unmatched: deny). Levels is [] (never null) when the
// request hit no level. A level's configured limit is under "spec" (the
// algo.Spec JSON of replay events and limits.yaml), since "limit" is the
// result's Quota (the IETF RateLimit-Policy's q), as in the summary; a
// level that denied says under "denied_by" the limit of its algorithm it
// waits for, as sluice replay's denied_by does (a sliding_log or
// window_counter limit's name or window, or "min_gap").
//
// Then, when there is one: "delay_ns", how long an allowed request waits
// before it acts (policy.Decision.Delay); "listed", the allow or deny list
// entry that decided; "permit", in decimal, the permit id under which an
// allowed check holds slots of concurrency limits, to renew and release
// them with (POST /v1/renew, /v1/release). An answer adds "released"
// (POST /v1/release: whether the permit held slots that are now free;
// false: it held none, having been released before, lost its hold or never
// been acquired), "store_error" (the store failed or timed out, and the
// decision is on_store_error's) and "settle_id" (an allowed check with
// "settle_within": the id to settle its estimate with, POST /v1/settle).
func AppendDecisionJSON(b []byte, d *policy.Decision) []byte { return appendDecisionJSON(b, d, "") }

// appendDecisionJSON is AppendDecisionJSON with storeError as store_error.
func appendDecisionJSON(b []byte, d *policy.Decision, storeError string) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = appendResult(b, d.Summary)
	b = append(b, `,"matched":`...)
	b = strconv.AppendBool(b, d.Matched)
	b = append(b, `,"levels":[`...)
	for i := range d.Levels {
		l := &d.Levels[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"pattern":`...)
		b = jsonenc.AppendString(b, l.Pattern)
		b = append(b, `,"key":`...)
		b = jsonenc.AppendString(b, l.Key)
		b = append(b, `,"spec":`...)
		b = l.AppendSpecJSON(b)
		b = append(b, `,"shadow":`...)
		b = strconv.AppendBool(b, l.Shadow)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, l.Result.Allowed)
		b = appendResult(b, l.Result)
		if by := levelDeniedBy(l); by != "" {
			b = append(b, `,"denied_by":`...)
			b = jsonenc.AppendString(b, by)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if d.Delay > 0 {
		b = append(b, `,"delay_ns":`...)
		b = strconv.AppendInt(b, int64(d.Delay), 10)
	}
	if d.Listed != "" {
		b = append(b, `,"listed":`...)
		b = jsonenc.AppendString(b, d.Listed)
	}
	if d.Permit != 0 {
		b = append(b, `,"permit":"`...)
		b = strconv.AppendInt(b, d.Permit, 10)
		b = append(b, '"')
	}
	if storeError != "" {
		b = append(b, `,"store_error":`...)
		b = jsonenc.AppendString(b, storeError)
	}
	return append(b, '}')
}

func appendResult(b []byte, r algo.Result) []byte {
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, r.Quota, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, r.Remaining, 10)
	b = append(b, `,"retry_after_ns":`...)
	b = strconv.AppendInt(b, int64(r.RetryAfter), 10)
	b = append(b, `,"reset_after_ns":`...)
	return strconv.AppendInt(b, int64(r.ResetAfter), 10)
}

// levelDeniedBy is what a level that denied waits for (Limit.DeniedBy),
// "" for a level that allowed or has no limit.
func levelDeniedBy(l *policy.Level) string {
	if l.Result.Allowed || l.Limit == nil {
		return ""
	}
	return algo.DeniedBy(l.Limit, l.Result.DeniedBy)
}

// checkRequest is the body of POST /v1/check:
//
//	{"path": ["user", "alex", "trade"], "cost": 1, "meta": {"user_id": "u-17"}}
//
// Path is required and not empty, or Paths, several paths decided
// together, all or nothing (per IP, per key and a quota in one check), as
// gRPC's descriptors are; Cost, for each path, defaults to 1 when left out
// (0 peeks: nothing is consumed), or Costs, with Paths, one per path (a
// request counted as 1 and its tokens as 4,000 in one check); Meta, optional, is any JSON object of at
// most maxMetaBytes, recorded in the consumers list of every level the
// request consumed from (see consumer). Unknown fields
// are an error.
type checkRequest struct {
	Path    []string
	Paths   [][]string
	Cost    int64 // 1 unless given
	hasCost bool
	Costs   []int64
	Meta    []byte // compacted
	// Limit is the request's own limit, {"limit": 100, "window": "1m"},
	// honoured on a node that says request_limit (policy.PathQuery.Limit).
	Limit *algo.FixedWindow
	// SettleWithin, "settle_within", makes the cost (each path's) an
	// estimate, settled later with POST /v1/settle (policy.Estimate): "10m".
	SettleWithin time.Duration
}

// Limits on a check request.
const (
	// maxBodyBytes bounds the body of POST /v1/check.
	maxBodyBytes = 64 << 10
	// maxPathSegments bounds the segments of a path.
	maxPathSegments = 64
	// maxPaths bounds the paths of one check (as maxDescriptors bounds
	// gRPC's descriptors).
	maxPaths = 16
	// maxMetaBytes bounds a check's meta object.
	maxMetaBytes = 1024
	// maxDepth bounds the nesting of a body, as encoding/json's.
	maxDepth = 10000
)

// errBody is a problem with a request body; its message is the detail of
// the 400 answer.
type errBody struct{ msg string }

func (e *errBody) Error() string { return e.msg }

func bodyErrorf(format string, args ...any) error {
	return &errBody{fmt.Sprintf(format, args...)}
}

// decodeBody decodes a request body into v: one JSON object (jsonReader
// reads it, and refuses a field given twice), then encoding/json into v,
// refusing a field v does not have; the error says what is wrong with the
// body.
func decodeBody(body []byte, v any) error {
	r := jsonReader{b: body}
	if err := r.object("", nil, func(int) error { return r.skip() }); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var typ *json.UnmarshalTypeError
	switch err := dec.Decode(v); {
	case errors.As(err, &typ):
		return bodyErrorf("%q must be %s, got a JSON %s", typ.Field, wantType(typ.Field), typ.Value)
	case err != nil: // json: unknown field "x"
		return bodyErrorf("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// checkFields are the fields of a check body, in checkRequest's order.
var checkFields = []string{"path", "paths", "cost", "costs", "meta", "limit", "settle_within"}

// parseCheckRequest parses and validates a check request body, the one
// parser of that format (a check's body is read with no reflection: what
// that pays, bench/NOTES.md): one JSON object with no unknown field and
// none twice (names match in any case, as encoding/json's), a non-empty
// path of at most maxPathSegments segments, a cost that is not negative,
// and a meta that is an object of at most maxMetaBytes. The path's
// segments go on path (scratch, may be nil). The error says what is wrong.
func parseCheckRequest(body []byte, path []string) (checkRequest, error) {
	req := checkRequest{Cost: 1}
	r := jsonReader{b: body}
	var limit struct {
		count  int64
		window string
		given  bool
	}
	var settleWithin string
	err := r.object("", checkFields, func(f int) (err error) {
		switch f {
		case 0:
			req.Path, err = r.strings("path", "an array of strings", path)
		case 1:
			req.Paths = make([][]string, 0, 2)
			err = r.array("paths", "an array of arrays of strings", func() error {
				p, err := r.strings("paths", "an array of arrays of strings", nil)
				req.Paths = append(req.Paths, p)
				return err
			})
		case 2:
			req.Cost, err = r.integer("cost", "an integer")
			req.hasCost = true
		case 3:
			req.Costs = make([]int64, 0, 2)
			err = r.array("costs", "an array of integers", func() error {
				n, err := r.integer("costs", "an array of integers")
				req.Costs = append(req.Costs, n)
				return err
			})
		case 4:
			req.Meta, err = r.meta()
		case 5:
			limit.given = true
			err = r.object("limit", []string{"limit", "window"}, func(f int) (err error) {
				if f == 0 {
					limit.count, err = r.integer("limit", "an integer")
				} else {
					limit.window, err = r.string("window", "a string")
				}
				return err
			})
		case 6:
			settleWithin, err = r.string("settle_within", "a string")
		}
		return err
	})
	if err != nil {
		return req, err
	}
	if req.Paths != nil {
		if req.Path != nil {
			return req, bodyErrorf(`give "path" or "paths", not both`)
		}
		if len(req.Paths) == 0 || len(req.Paths) > maxPaths {
			return req, bodyErrorf(`"paths" must hold 1 to %d paths, got %d`, maxPaths, len(req.Paths))
		}
		for i, p := range req.Paths {
			err := validPath(p)
			switch {
			case len(p) == 0:
				err = bodyErrorf(`is empty`)
			case len(p) > maxPathSegments:
				err = bodyErrorf(`has %d segments, more than %d`, len(p), maxPathSegments)
			}
			if err != nil {
				return req, bodyErrorf(`"paths"[%d]: %s`, i, strings.Replace(err.Error(), `"path"`, "segment ", 1))
			}
		}
		req.Path = req.Paths[0] // for what needs one (the store-error answer's match)
	}
	switch {
	case len(req.Path) == 0:
		return req, bodyErrorf(`"path" is missing or empty: give the request's path segments, e.g. ["user","alex","trade"] (or "paths": several paths decided together)`)
	case len(req.Path) > maxPathSegments:
		return req, bodyErrorf(`"path" has %d segments, more than %d`, len(req.Path), maxPathSegments)
	case req.Cost < 0:
		return req, bodyErrorf(`"cost" must not be negative, got %d`, req.Cost)
	case req.Costs != nil && req.hasCost:
		return req, bodyErrorf(`give "cost" (the same for every path) or "costs" (one per path), not both`)
	case req.Costs != nil && req.Paths == nil:
		return req, bodyErrorf(`"costs" goes with "paths", one per path: a check of one "path" gives "cost"`)
	case req.Costs != nil && len(req.Costs) != len(req.Paths):
		return req, bodyErrorf(`"costs" must hold one cost per path, in their order: %d paths, %d costs`, len(req.Paths), len(req.Costs))
	case !utf8.Valid(body):
		return req, bodyErrorf("the body is not valid UTF-8")
	}
	for i, c := range req.Costs {
		if c < 0 {
			return req, bodyErrorf(`"costs"[%d] must not be negative, got %d`, i, c)
		}
	}
	if err := validPath(req.Path); err != nil {
		return req, err
	}
	if limit.given {
		w, err := yamlfile.ParseDuration(limit.window)
		if err != nil || limit.count < 1 || w <= 0 {
			return req, bodyErrorf(`"limit" must be {"limit": N, "window": "1m"}, N at least 1 and a positive window%s`, errSuffix(err))
		}
		req.Limit = &algo.FixedWindow{Count: limit.count, Window: w}
	}
	if settleWithin != "" {
		w, err := yamlfile.ParseDuration(settleWithin)
		switch {
		case err != nil || w < store.MinTicket || w > store.MaxTicket:
			return req, bodyErrorf(`"settle_within" must be a duration from %v to %v, such as "10m"%s`, store.MinTicket, store.MaxTicket, errSuffix(err))
		case req.Limit != nil:
			return req, bodyErrorf(`"settle_within" and "limit" do not combine: an estimate is settled by the policy's limits`)
		}
		req.SettleWithin = w
	}
	return req, nil
}

// jsonReader reads JSON from b at i, a value at a time, with
// encoding/json's grammar and clear errors.
type jsonReader struct {
	b     []byte
	i     int
	depth int
}

// next skips white space and returns the byte at i, 0 at the end.
func (r *jsonReader) next() byte {
	for ; r.i < len(r.b); r.i++ {
		if c := r.b[r.i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// syntaxError says that the byte at i is not what the grammar wants
// there ("looking for beginning of value"), or that the body ended.
func (r *jsonReader) syntaxError(wants string) error {
	if r.i >= len(r.b) {
		return bodyErrorf("malformed JSON: the body ends in the middle of a value")
	}
	return bodyErrorf("malformed JSON at byte %d: invalid character %q %s", r.i+1, r.b[r.i], wants)
}

// kinds names a value by its first byte.
var kinds = [256]string{'{': "object", '[': "array", '"': "string", 't': "bool", 'f': "bool", 'n': "null", '-': "number",
	'0': "number", '1': "number", '2': "number", '3': "number", '4': "number", '5': "number", '6': "number", '7': "number", '8': "number", '9': "number"}

// typeError says that field ("": the body) must be want and what the
// value at i is.
func (r *jsonReader) typeError(field, want string) error {
	start, got := r.i, kinds[r.next()]
	if got == "number" {
		if _, _, err := r.number(); err != nil {
			return err
		}
		got += " " + string(r.b[start:r.i])
	}
	switch {
	case got == "":
		return r.syntaxError("looking for beginning of value")
	case field == "":
		return bodyErrorf("the body must be a JSON object, got a JSON %s", got)
	}
	return bodyErrorf("%q must be %s, got a JSON %s", field, want, got)
}

// null reads a null if one is next: a null leaves a field as it is, as
// encoding/json leaves it.
func (r *jsonReader) null() bool {
	if r.next() == 'n' && bytes.HasPrefix(r.b[r.i:], []byte("null")) {
		r.i += 4
		return true
	}
	return false
}

// object reads the object of field ("" for the body), each key given
// once (in any case, as encoding/json matches names), calling set with the
// index of its name in names (any key, -1, when names is nil), with i at
// its value; a null value is skipped. For the body, one object and nothing
// after it.
func (r *jsonReader) object(field string, names []string, set func(int) error) error {
	switch c := r.next(); {
	case c == 0 && field == "":
		return bodyErrorf("empty body: want a JSON object such as {\"path\": [\"user\", \"alex\"]}")
	case c != '{':
		return r.typeError(field, "an object")
	}
	var seen uint64   // names' bits
	var keys []string // names nil: the keys
	err := r.members(func(key string) error {
		same := func(n string) bool { return strings.EqualFold(n, key) }
		f := slices.IndexFunc(names, same)
		switch {
		case f < 0 && names != nil:
			return bodyErrorf("unknown field %q", key)
		case f >= 0 && seen&(1<<f) != 0 || f < 0 && slices.ContainsFunc(keys, same):
			return bodyErrorf("%q is given twice: give each field once", key)
		case f < 0:
			keys = append(keys, key)
		default:
			seen |= 1 << f
		}
		if r.null() {
			return nil
		}
		return set(f)
	})
	if err == nil && field == "" {
		// Only white space after the value (next's 0 is also a NUL byte).
		if r.next(); r.i < len(r.b) {
			return bodyErrorf("malformed JSON: more than one value in the body")
		}
	}
	return err
}

// members reads the object at i, calling value with each key and i at
// its value.
func (r *jsonReader) members(value func(key string) error) error {
	return r.items('}', func() error {
		if r.next() != '"' {
			return r.syntaxError("looking for beginning of object key string")
		}
		key, err := r.string("", "")
		if err == nil && r.next() != ':' {
			err = r.syntaxError("after object key")
		}
		if err != nil {
			return err
		}
		r.i++
		return value(key)
	})
}

// array reads an array of values read by item; field and want word the
// error for another type.
func (r *jsonReader) array(field, want string, item func() error) error {
	if r.next() != '[' {
		return r.typeError(field, want)
	}
	return r.items(']', item)
}

// items reads the members or elements of the object or array at i, to
// its end; maxDepth of them inside each other at most.
func (r *jsonReader) items(end byte, item func() error) error {
	if r.depth++; r.depth > maxDepth {
		return bodyErrorf("malformed JSON: nested more than %d deep", maxDepth)
	}
	defer func() { r.depth-- }()
	r.i++
	if r.next() == end {
		r.i++
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		switch r.next() {
		case ',':
			r.i++
		case end:
			r.i++
			return nil
		case ']':
			return r.syntaxError("after array element")
		default:
			return r.syntaxError("after object key:value pair")
		}
	}
}

// strings reads an array of strings (a null one is "") onto dst[:0],
// which may be nil; field and want word the error for another type.
func (r *jsonReader) strings(field, want string, dst []string) ([]string, error) {
	dst = append(dst[:0:cap(dst)], "")[:0] // not nil: given
	err := r.array(field, want, func() error {
		s, err := "", error(nil)
		if !r.null() {
			s, err = r.string(field, want)
		}
		dst = append(dst, s)
		return err
	})
	return dst, err
}

// string reads a string, decoding its escapes; a lone surrogate becomes
// U+FFFD, as encoding/json makes it. Bytes that are not UTF-8 are kept
// (for the caller to refuse). field and want word the error for another
// type.
func (r *jsonReader) string(field, want string) (string, error) {
	if r.next() != '"' {
		return "", r.typeError(field, want)
	}
	start := r.i + 1
	var s []byte // once an escape is met
	for j := start; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			r.i = j + 1
			if s == nil {
				return string(r.b[start:j]), nil
			}
			return string(append(s, r.b[start:j]...)), nil
		case c < 0x20:
			r.i = j
			return "", r.syntaxError("in string literal")
		case c != '\\':
			continue
		}
		s, r.i = append(s, r.b[start:j]...), j+1
		if k := strings.IndexByte(`"\/bfnrt`, r.peek()); k >= 0 {
			s, start, j = append(s, "\"\\/\b\f\n\r\t"[k]), j+2, j+1
			continue
		}
		rn, ok := r.hex4(j + 2)
		if r.peek() != 'u' || !ok {
			return "", r.syntaxError("in string escape code")
		}
		start, j = j+6, j+5
		if rn2, ok := r.hex4(j + 3); utf16.IsSurrogate(rn) && ok && string(r.b[j+1:j+3]) == `\u` {
			if rn = utf16.DecodeRune(rn, rn2); rn != utf8.RuneError {
				start, j = j+7, j+6
			}
		} else if utf16.IsSurrogate(rn) {
			rn = utf8.RuneError
		}
		s = utf8.AppendRune(s, rn)
	}
	r.i = len(r.b)
	return "", r.syntaxError("")
}

// peek is the byte at i, 0 at the end.
func (r *jsonReader) peek() byte {
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// hex4 reads the four hex digits at b[i:], false if there are none.
func (r *jsonReader) hex4(i int) (rune, bool) {
	if i+4 > len(r.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(r.b[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// jsonNumber is the grammar of a JSON number.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// number reads a number, and its value when it is an integer that fits
// an int64 (isInt).
func (r *jsonReader) number() (n int64, isInt bool, err error) {
	start := r.i
	for r.i < len(r.b) && strings.IndexByte("+-.eE0123456789", r.b[r.i]) >= 0 {
		r.i++
	}
	tok := r.b[start:r.i]
	if !jsonNumber.Match(tok) {
		return 0, false, bodyErrorf("malformed JSON at byte %d: %q is not a number", start+1, tok)
	}
	n, err = strconv.ParseInt(string(tok), 10, 64)
	return n, err == nil, nil
}

// integer reads an integer that fits an int64; field and want word the
// error for another value.
func (r *jsonReader) integer(field, want string) (int64, error) {
	if kinds[r.next()] == "number" {
		start := r.i
		if n, isInt, err := r.number(); isInt || err != nil {
			return n, err
		}
		r.i = start
	}
	return 0, r.typeError(field, want)
}

// meta reads the meta object, compacted.
func (r *jsonReader) meta() ([]byte, error) {
	start := r.next()
	m := r.b[r.i:]
	if err := r.skip(); err != nil {
		return nil, err
	}
	m = m[:len(m)-len(r.b[r.i:])]
	if start != '{' {
		return nil, bodyErrorf(`"meta" must be a JSON object, got %s`, firstBytes(m, 40))
	}
	var buf bytes.Buffer
	json.Compact(&buf, m) // valid: skip has read it
	if buf.Len() > maxMetaBytes {
		return nil, bodyErrorf(`"meta" is %d bytes, more than %d`, buf.Len(), maxMetaBytes)
	}
	return buf.Bytes(), nil
}

// skip reads any value, checking its syntax.
func (r *jsonReader) skip() error {
	switch c := r.next(); kinds[c] {
	case "object":
		return r.members(func(string) error { return r.skip() })
	case "array":
		return r.items(']', r.skip)
	case "string":
		_, err := r.string("", "")
		return err
	case "number":
		_, _, err := r.number()
		return err
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(r.b[r.i:], []byte(lit)) {
			r.i += len(lit)
			return nil
		}
	}
	return r.syntaxError("looking for beginning of value")
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// validPath checks the segments of a check's path: each a string that is
// not empty (a JSON null decodes to one), holds no control character and
// no U+FFFD, which is what a decoder makes of invalid UTF-8 or a lone
// surrogate escape, so that ids that are not text cannot all share one
// counter.
func validPath(path []string) error {
	for i, seg := range path {
		switch {
		case seg == "":
			return bodyErrorf(`"path"[%d] is empty (or null): every segment names something`, i)
		case !utf8.ValidString(seg):
			return bodyErrorf(`"path"[%d] is not valid UTF-8`, i)
		case strings.ContainsRune(seg, utf8.RuneError):
			return bodyErrorf(`"path"[%d] holds U+FFFD: invalid UTF-8 or a lone surrogate escape`, i)
		case strings.ContainsFunc(seg, isControl):
			return bodyErrorf(`"path"[%d] holds a control character`, i)
		}
	}
	return nil
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func wantType(field string) string {
	switch field {
	case "path", "path[]":
		return "an array of strings"
	case "cost":
		return "an integer"
	case "costs", "costs[]":
		return "an array of integers"
	}
	return "another type"
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }

// handleCheck serves POST /v1/check: 200 with the decision when allowed,
// 429 when limited, with the RateLimit fields (and Retry-After when
// denied, unless the cost can never be admitted); 400 with a problem+json
// body for a malformed request. When the store fails, the answer is the
// on_store_error policy's, with store_error set in the body and no
// RateLimit fields.
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	c := answer.Get("http")
	defer c.Put()
	meta, ok := s.readCheck(w, r, c)
	if !ok {
		return
	}
	s.pipe.Answer(r.Context(), c)
	s.observe(c)
	switch {
	case c.Gone:
		return
	case c.Status == http.StatusBadRequest:
		writeProblem(w, c.Status, c.Err.Error())
		return
	case len(meta) > 0 && c.Decision.Allowed && !c.Failed:
		for i := range c.Query.Paths {
			if pq := &c.Query.Paths[i]; pq.Cost > 0 {
				s.consumers.record(pq.Match.Hits, pq.Cost, meta)
			}
		}
	}
	s.writeCheck(w, c)
}

// readCheck decodes a check's body into c: its query, and what it does
// beside deciding; and returns its meta. A body that cannot be read or is
// bad is refused here (ok false).
func (s *Server) readCheck(w http.ResponseWriter, r *http.Request, c *answer.Call) (meta json.RawMessage, ok bool) {
	body, ok := s.readBodyOrRefuse(w, r, c.Body[:0])
	c.Body = body[:0]
	if !ok {
		return nil, false
	}
	req, err := parseCheckRequest(body, c.Path)
	if err != nil {
		s.badRequest(w, err)
		return nil, false
	}
	if req.Paths == nil {
		c.Path = req.Path[:0]
	}
	paths := max(len(req.Paths), 1)
	c.Query.Paths = slices.Grow(c.Query.Paths, paths)[:paths]
	pqs := c.Query.Paths
	for i := range pqs {
		pqs[i].Path, pqs[i].Cost, pqs[i].Limit = req.Path, req.Cost, req.Limit
		if req.Paths != nil {
			pqs[i].Path = req.Paths[i]
		}
		if req.Costs != nil {
			pqs[i].Cost = req.Costs[i]
		}
		// A check that takes slots takes them under a new permit id,
		// which the answer gives for /v1/renew and /v1/release.
		if pqs[i].Cost > 0 {
			c.Query.Op = policy.Acquire
		}
	}
	if req.SettleWithin > 0 {
		c.Query.Op, c.Query.Within = policy.Estimate, req.SettleWithin
	}
	return req.Meta, true
}

// writeCheck answers a check: its status, the header fields and the
// decision's JSON.
func (s *Server) writeCheck(w http.ResponseWriter, c *answer.Call) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	c.SetHeader(h, s.cfg.Headers != "legacy", s.cfg.Headers != "draft")
	storeErr := ""
	if c.Failed {
		storeErr = "store unavailable: " + c.Err.Error()
	}
	out := appendDecisionJSON(c.Buf[:0], &c.Decision, storeErr)
	if c.Decision.Ticket != "" {
		out = append(out[:len(out)-1], `,"settle_id":`...)
		out = append(jsonenc.AppendString(out, c.Decision.Ticket), '}')
	}
	out = append(out, '\n')
	c.Buf = out[:0]
	if len(out) > 2048 { // past what net/http measures by itself
		h["Content-Length"] = []string{strconv.Itoa(len(out))}
	}
	w.WriteHeader(c.Status)
	w.Write(out)
}

// contentTypeJSON is shared by every answer: net/http only reads it.
var contentTypeJSON = []string{"application/json"}

// errTooLarge is readBody's error for a body over maxBodyBytes: a 413.
var errTooLarge = errors.New("the body is too large")

// readBodyOrRefuse reads the body into buf (readBody), or answers 413 for
// one over maxBodyBytes and 400 for one that cannot be read, counts the
// bad request and reports false.
func (s *Server) readBodyOrRefuse(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, bool) {
	body, err := readBody(r, buf)
	if err != nil {
		s.m.badRequests.WithLabelValues("http").Inc()
		status := http.StatusBadRequest
		if errors.Is(err, errTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		writeProblem(w, status, err.Error())
		return body, false
	}
	return body, true
}

// readBody reads at most maxBodyBytes of the body into buf.
func readBody(r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > maxBodyBytes {
		return buf, fmt.Errorf("%w: %d bytes, more than %d", errTooLarge, r.ContentLength, maxBodyBytes)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):min(cap(buf), maxBodyBytes+1)]
		if len(room) == 0 {
			break
		}
		n, err := r.Body.Read(room)
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return buf, bodyErrorf("reading the body: %v", err)
		}
	}
	if len(buf) > maxBodyBytes {
		return buf, fmt.Errorf("%w: more than %d bytes", errTooLarge, maxBodyBytes)
	}
	return buf, nil
}
