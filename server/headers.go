package server

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// The RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers, written for both APIs (HTTP
// response headers, and Envoy's response_headers_to_add) with httplimit's
// encoder, so that the service and the middleware agree: one list member
// per enforced (non-shadow) level, named by httplimit.LevelName (its policy
// pattern, plus "#i" for the i-th limit of a node with several):
//
//	RateLimit-Policy: "user/*";q=16;w=32, "user/*/trade#0";q=1000;w=3600
//	RateLimit: "user/*";r=15;t=2, "user/*/trade#0";r=999;t=1712
//
// q is the level's limit (what it admits at once), w the seconds in which
// the algorithm grants q, r what remains, t the seconds until the level is
// back to full when it allowed the request and until it admits it when it
// denied it (see httplimit.DraftHeaders).
const (
	headerPolicy    = "RateLimit-Policy"
	headerRateLimit = "RateLimit"
)

// appendRateLimitFields appends the two field values for levels to b and
// returns them (they share b's array, the RateLimit value right after the
// RateLimit-Policy value); both are empty when no level is enforced.
func appendRateLimitFields(b []byte, levels []sluice.Level) (pol, rl []byte) {
	b, end := httplimit.AppendDraftFields(b, levels)
	return b[:end], b[end:]
}
