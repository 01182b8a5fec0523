package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
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
	Path  []string   `json:"path"`
	Paths [][]string `json:"paths,omitempty"`
	// Limit is the request's own limit, honoured on a node that says
	// request_limit (policy.PathQuery.Limit).
	Limit *requestLimit   `json:"limit,omitempty"`
	Cost  *int64          `json:"cost,omitempty"`
	Costs []int64         `json:"costs,omitempty"`
	Meta  json.RawMessage `json:"meta,omitempty"`
	// SettleWithin makes the cost (each path's) an estimate, settled
	// later with POST /v1/settle (policy.Estimate): "10m".
	SettleWithin string `json:"settle_within,omitempty"`

	limit  *algo.FixedWindow // Limit, parsed
	within time.Duration     // SettleWithin, parsed
}

// requestLimit is a check's own limit: {"limit": 100, "window": "1m"}.
type requestLimit struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
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
)

// errBody is a problem with a request body; its message is the detail of
// the 400 answer.
type errBody struct{ msg string }

func (e *errBody) Error() string { return e.msg }

func bodyErrorf(format string, args ...any) error {
	return &errBody{fmt.Sprintf(format, args...)}
}

// decodeBody decodes a request body into v: one JSON value, with no
// field v does not have and none twice; the error says what is wrong with
// the body.
func decodeBody(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(body, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bodyErrorf("malformed JSON: more than one value in the body")
	}
	if k := repeatedField(body); k != "" {
		return bodyErrorf("%q is given twice: give each field once", k)
	}
	return nil
}

// repeatedField returns a field of the body's top-level object that
// appears twice (encoding/json matches names in any case, and keeps the
// last), or "".
func repeatedField(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	var seen []string
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return ""
		}
		for _, s := range seen {
			if strings.EqualFold(s, k) {
				return k
			}
		}
		seen = append(seen, k)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// parseCheckRequest decodes and validates a check request body: one JSON
// object with no unknown fields, a non-empty path of at most
// maxPathSegments segments, a cost that is not negative, and a meta that is
// an object of at most maxMetaBytes. The error says what is wrong.
func parseCheckRequest(body []byte) (checkRequest, error) {
	var req checkRequest
	if err := decodeBody(body, &req); err != nil {
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
	case req.Cost != nil && *req.Cost < 0:
		return req, bodyErrorf(`"cost" must not be negative, got %d`, *req.Cost)
	case req.Costs != nil && req.Cost != nil:
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
	if l := req.Limit; l != nil {
		w, err := yamlfile.ParseDuration(l.Window)
		if err != nil || l.Limit < 1 || w <= 0 {
			return req, bodyErrorf(`"limit" must be {"limit": N, "window": "1m"}, N at least 1 and a positive window%s`, errSuffix(err))
		}
		req.limit = &algo.FixedWindow{Count: l.Limit, Window: w}
	}
	if req.SettleWithin != "" {
		w, err := yamlfile.ParseDuration(req.SettleWithin)
		switch {
		case err != nil || w < store.MinTicket || w > store.MaxTicket:
			return req, bodyErrorf(`"settle_within" must be a duration from %v to %v, such as "10m"%s`, store.MinTicket, store.MaxTicket, errSuffix(err))
		case req.limit != nil:
			return req, bodyErrorf(`"settle_within" and "limit" do not combine: an estimate is settled by the policy's limits`)
		}
		req.within = w
	}
	if len(req.Meta) > 0 {
		m := bytes.TrimSpace(req.Meta)
		if bytes.Equal(m, []byte("null")) {
			req.Meta = nil
		} else if len(m) == 0 || m[0] != '{' {
			return req, bodyErrorf(`"meta" must be a JSON object, got %s`, firstBytes(m, 40))
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, m); err != nil {
				return req, bodyErrorf(`"meta": %v`, err)
			}
			if buf.Len() > maxMetaBytes {
				return req, bodyErrorf(`"meta" is %d bytes, more than %d`, buf.Len(), maxMetaBytes)
			}
			req.Meta = buf.Bytes()
		}
	}
	return req, nil
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

// describeJSONError turns a decoding error into a message for the client.
func describeJSONError(body []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return bodyErrorf("empty body: want a JSON object such as {\"path\": [\"user\", \"alex\"]}")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bodyErrorf("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return bodyErrorf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return bodyErrorf("%q must be %s, got a JSON %s", typ.Field, wantType(typ.Field), typ.Value)
		}
		return bodyErrorf("the body must be a JSON object, got a JSON %s", typ.Value)
	}
	// json: unknown field "x"
	return bodyErrorf("%s", stripJSONPrefix(err.Error()))
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

func stripJSONPrefix(s string) string {
	const p = "json: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
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
	var req checkRequest
	cost := int64(1)
	path, n, hasCost, fast := parseCheckFast(body, c.Path[:0])
	c.Path = path[:0]
	if fast {
		req.Path = path
		if hasCost {
			cost = n
		}
	} else {
		var err error
		if req, err = parseCheckRequest(body); err != nil {
			s.badRequest(w, err)
			return nil, false
		}
		if req.Cost != nil {
			cost = *req.Cost
		}
	}
	paths := max(len(req.Paths), 1)
	c.Query.Paths = slices.Grow(c.Query.Paths, paths)[:paths]
	pqs := c.Query.Paths
	for i := range pqs {
		pqs[i].Path, pqs[i].Cost, pqs[i].Limit = req.Path, cost, req.limit
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
	if req.within > 0 {
		c.Query.Op, c.Query.Within = policy.Estimate, req.within
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

// parseCheckFast decodes the common check body, {"path": [...], "cost": n},
// without reflection. It gives up (ok false) on anything unusual, such as
// escapes, non-ASCII bytes, meta, duplicate or unknown fields, or a value
// of another type, and the caller then decodes with parseCheckRequest,
// which also words the errors; when ok, the result is what
// parseCheckRequest would return (TestParseCheckFastAgrees and
// FuzzParseCheck check that). What it pays: bench/NOTES.md, "What each
// micro-optimisation pays".
func parseCheckFast(b []byte, path []string) (_ []string, cost int64, hasCost, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return path, 0, false, false
	}
	i = skipWS(b, i+1)
	seenPath := false
	if i < len(b) && b[i] == '}' {
		return path, 0, false, false // no path: let the slow path word it
	}
	for {
		key, j, ok := fastString(b, i)
		if !ok {
			return path, 0, false, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return path, 0, false, false
		}
		i = skipWS(b, i+1)
		switch key {
		case "path":
			if seenPath || i >= len(b) || b[i] != '[' {
				return path, 0, false, false
			}
			seenPath = true
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == ']' {
				return path, 0, false, false
			}
			for {
				s, j, ok := fastString(b, i)
				if !ok || s == "" || len(path) == maxPathSegments { // "": the slow path words the error
					return path, 0, false, false
				}
				path = append(path, s)
				i = skipWS(b, j)
				if i >= len(b) {
					return path, 0, false, false
				}
				if b[i] == ']' {
					i++
					break
				}
				if b[i] != ',' {
					return path, 0, false, false
				}
				i = skipWS(b, i+1)
			}
		case "cost":
			if hasCost {
				return path, 0, false, false
			}
			start := i
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				cost = cost*10 + int64(b[i]-'0')
				i++
			}
			n := i - start
			if n == 0 || n > 18 || n > 1 && b[start] == '0' || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
				return path, 0, false, false
			}
			hasCost = true
		default:
			return path, 0, false, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return path, 0, false, false
		}
		if b[i] == '}' {
			i++
			break
		}
		if b[i] != ',' {
			return path, 0, false, false
		}
		i = skipWS(b, i+1)
	}
	if skipWS(b, i) != len(b) || !seenPath {
		return path, 0, false, false
	}
	return path, cost, hasCost, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString reads a JSON string of printable ASCII without escapes
// starting at b[i].
func fastString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", j, false
		}
	}
	return "", len(b), false
}
