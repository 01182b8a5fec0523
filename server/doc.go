// Package server is `sluice serve`: rate-limit decisions over HTTP/JSON
// and as Envoy's rate limit service over gRPC, on one store (memory or
// Redis) and one policy (limits.yaml, see package policy) that reloads.
//
// # HTTP/JSON
//
// POST /v1/check takes a CheckRequest, {"path": ["user", "alex",
// "trade"], "cost": 1, "meta": {...}}, and decides the path with every
// level on its walk as one all-or-nothing decision (policy.Checker, as
// every API here decides). It
// answers 200 when allowed and 429 when limited, with a DecisionJSON body
// (the shape `sluice replay --policy` prints), the RateLimit-Policy and
// RateLimit fields of draft-ietf-httpapi-ratelimit-headers (see package
// headers), and Retry-After when denied (none when the cost
// can never be admitted). Malformed JSON, unknown fields, an empty path, a
// negative cost, an oversized body (MaxBodyBytes) or a key too long for
// the store get 400 with an application/problem+json body (RFC 9457) whose
// detail says what is wrong.
//
// GET /healthz answers 200 while the process is up; GET /readyz 200 when a
// policy is loaded, the store answers a PING and the server is not
// draining. GET /metrics is Prometheus (see metrics).
//
// # Admin
//
// The /admin/v1/ endpoints need "Authorization: Bearer <token>" (compared
// in constant time); a missing or wrong token gets 401. Without a
// configured admin token they are disabled and answer 404, as any unknown
// path does, so that an unconfigured server does not even show that they
// exist. Another method than the ones below is 405. A key is named
// as the policy names it, by its path: ?path=user&path=alex&path=trade.
//
//	GET    /admin/v1/state?path=…      a peek (cost 0) of every level of the path (DecisionJSON)
//	DELETE /admin/v1/state?path=…      reset the path's own levels (a store.Resetter); with
//	                                   &levels=all also the levels all callers share
//	GET    /admin/v1/consumers?path=…  who consumed each level recently (ConsumersJSON)
//
// See Consumer for what the consumers lists record.
//
// # gRPC
//
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, with
// Envoy's matching semantics (see rateLimitService for the mapping and
// DescriptorPath), and grpc.health.v1.Health (SERVING until shutdown, for
// "" and the rate limit service's name).
//
// # Failures and operations
//
// Every decision is bounded by the decision timeout (default 50ms). When
// the store fails or times out, the answer follows on_store_error: allow
// (fail open, the default) or deny (fail closed); the HTTP body then says
// store_error and carries no RateLimit fields. Store failures are logged
// at most once a second, with a count of those left out. Started while
// Redis cannot be dialled, the service serves all the same (by
// on_store_error, and not ready) and connects in the background; a bad
// URL, password or TLS certificate stops it at start instead.
//
// The policy reloads on SIGHUP and when its file's modification time or
// size changes (polled every second): a file that does not parse is logged
// with every error's position and the policy in force stays. SIGTERM or
// SIGINT stops accepting, lets in-flight requests finish (within 10s),
// flushes the consumers lists, closes the store and exits 0. Logs are
// log/slog, text or JSON.
package server
