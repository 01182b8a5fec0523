package httplimit

// HeaderStyle selects the rate-limit headers a Middleware sends.
type HeaderStyle int

const (
	// DraftHeaders are the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-10, one Item per enforced
	// level, as package answer writes them (the service sends the same):
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
