// Package problem writes RFC 9457 problem details responses
// (application/problem+json), for the middleware and the service alike.
package problem

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonenc"
	"github.com/sluicehq/sluice/policy"
)

// Status is the HTTP status of a decision, the one mapping of the
// service and the middleware (httplimit) alike:
//
//	200  allowed
//	429  rate limited: a level denied (Retry-After: when it admits again)
//	403  denied because a path matched no policy (unmatched: deny) and no
//	     level denied, or by a deny list: not over a quota
//
// The service answers 503 instead when the store failed and its
// on_store_error is deny.
func Status(d *policy.Decision) int {
	switch {
	case d.Allowed:
		return http.StatusOK
	case strings.HasPrefix(d.Listed, "deny ") || !d.Matched && policy.Denier(d.Levels) == nil:
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}

// Write answers status with a problem details body of the given type,
// title and detail; ext, if set, appends extension members, each starting
// with a comma. An empty typ is "about:blank" and an empty title is the
// status text.
func Write(w http.ResponseWriter, status int, typ, title, detail string, ext func([]byte) []byte) {
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
