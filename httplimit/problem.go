package httplimit

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
)

// QuotaExceededType is the problem type URI of draft-ietf-httpapi-
// ratelimit-headers-10 §5.1, "quota-exceeded".
const QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// QuotaExceeded is the default Options.OnLimited. It answers 429 Too Many
// Requests with an application/problem+json body (RFC 9457) of the
// quota-exceeded type:
//
//	{"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title": "Request cannot be satisfied as assigned quota has been exceeded",
//	 "status": 429,
//	 "detail": "Quota exceeded: retry in 2 seconds.",
//	 "violated-policies": ["user/*"],
//	 "limit": 16,
//	 "retry_after": 2}
//
// violated-policies (the draft's extension member) names the enforced
// levels that denied the request, as DraftHeaders does; limit is the quota
// of the level that holds the request back longest, and retry_after equals
// the Retry-After header. When the request's cost exceeds a limit it can
// never be admitted: retry_after is left out and detail says so. It is
// left out too when the retry time is unknown (Summary.RetryAfter is 0, as
// from a script that sends no Retry-After).
//
// A request denied because it matched no policy (a policy with unmatched:
// deny), and by no level, is not over a quota: it gets 403 Forbidden, with
// an about:blank problem.
func QuotaExceeded(w http.ResponseWriter, r *http.Request, d *policy.Decision) {
	answer.WriteProblem(w, 0, "", d)
}

// BadRequest is the default Options.OnBadRequest: 400 Bad Request with an
// about:blank problem+json body. For a KeyFunc's ErrNoKey error the detail
// is the error's text; otherwise it is generic, so that nothing about the
// store leaks.
func BadRequest(w http.ResponseWriter, r *http.Request, err error) {
	detail := "The request cannot be rate limited."
	if errors.Is(err, ErrNoKey) {
		detail = err.Error()
	}
	answer.WriteProblem(w, http.StatusBadRequest, detail, nil)
}

// Unavailable answers 503 Service Unavailable, with Retry-After: 1 and an
// about:blank problem+json body: what FailClosed sends when a check fails,
// as sluice serve does when its store fails under on_store_error: deny.
func Unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header()["Retry-After"] = []string{"1"}
	answer.WriteProblem(w, http.StatusServiceUnavailable, "The rate limiter is unavailable.", nil)
}
