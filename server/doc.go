// Package server is `sluice serve`: rate-limit decisions over HTTP/JSON
// and as Envoy's rate limit service over gRPC, on one store (memory or
// Redis) and one policy (limits.yaml, see package policy) that reloads.
//
// # HTTP/JSON
//
// POST /v1/check takes a checkRequest, {"path": ["user", "alex",
// "trade"], "cost": 1, "meta": {...}}, and decides the path with every
// level on its walk as one all-or-nothing decision (policy.Checker, as
// every API here decides). It answers with a DecisionJSON body (the shape
// `sluice replay --policy` prints) and, but for a store failure, the
// RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers (see package headers); the status
// means one thing here and in package httplimit:
//
//	200  allowed (also when the store failed and on_store_error is allow)
//	429  rate limited, with Retry-After (none when the cost can never be
//	     admitted); the summary describes the level that denied
//	503  the store failed or timed out and on_store_error is deny, with
//	     Retry-After: 1
//	403  the path matched no policy under unmatched: deny
//
// Malformed JSON, unknown fields, an empty path, a
// negative cost, an oversized body (maxBodyBytes) or a key too long for
// the store get 400 with an application/problem+json body (RFC 9457) whose
// detail says what is wrong.
//
// POST /v1/check takes "path", or "paths" (at most maxPaths): several
// paths decided together, all or nothing, as a gRPC request's descriptors
// are; a forward-auth route's paths do the same.
//
// # Estimates
//
// A check with "settle_within" (1ms to 24h) makes its cost an estimate
// (policy.Checker.Estimate): admitted only if it fits, never recorded when
// denied, and answered with a "settle_id". POST /v1/settle {"settle_id",
// "cost"} settles it at its real cost once (policy.Checker.Settle), with no
// admin token: 200 {"settled": true}, or false for an id settled, expired
// or never issued; 400 for a malformed body; 503 when the store failed.
//
// # Queues
//
// POST /v1/queues/{name} admits an entry to an admission queue (package
// queue) named under queues: in the config, each with its capacity. The
// body is a JSON object of string fields (it may be empty, {}: an entry
// whose arrival is the message; a field may not have an empty name). An
// Idempotency-Key header (at most 200 bytes) is the entry's dedup id;
// without one the server makes one, and every answer that may have queued
// the entry carries it in its Idempotency-Key header. 201 with a
// queueAdded body ({"id", "length", "duplicate", "idempotency_key"}); 200
// with the entry's id while an entry with the same Idempotency-Key and
// fields is queued, or was handled within the last hour
// (backend.DedupWindow); 422 when that entry has other fields (nothing
// queued); 429 with Retry-After (the estimated wait from the
// drain rate, at least 1 s) when the queue is full (nothing queued); 404
// for a queue not configured (the name shown up to 64 bytes); 400 for a
// body that is not such an object; 503 with Retry-After: 1 when the store
// fails. A 503 does not say the entry was not queued (the store may have
// applied it after the deadline): retry with its Idempotency-Key, which
// answers 200 if it was, for an hour after the entry was handled. A
// worker sees the key as queue.Entry.Dedup. Workers drain the queue with
// `sluice queue work` or queue.Queue.Work on the same store, so queues
// need a Redis store: with the memory store the server refuses to start.
//
// GET /healthz answers 200 while the process is up; GET /readyz 200 when a
// policy is loaded and the server is not draining, saying in its body
// whether the store answers a PING (a store that does not is degraded, not
// unready: the service answers by on_store_error). GET /metrics is Prometheus, all prefixed sluice_:
//
//	sluice_checks_total{api,outcome}          checks by API (http, grpc) and outcome:
//	                                          allowed, limited, store_error_allowed,
//	                                          store_error_denied
//	sluice_decisions_total{node,outcome}      level decisions by policy node (its pattern)
//	                                          and outcome: allowed, limited, shadow_limited
//	sluice_check_duration_seconds{api}        decision latency, from the parsed request
//	                                          to the decision (store round trip included)
//	sluice_store_errors_total                 decisions the store failed or timed out
//	sluice_bad_requests_total{api}            requests refused as malformed
//	sluice_policy_reloads_total{result}       policy reloads: success, failure
//	sluice_policy_loaded_timestamp_seconds    when the current policy was loaded
//	sluice_consumers_dropped_total            consumer entries dropped (queue full or store error)
//	sluice_store_up                           1 when the store answers a ping at scrape time
//	                                          (within the timeout), else 0; always 1 for the
//	                                          memory store
//	sluice_build_info{version,goversion}      1, labelled with the build (see Version)
//	sluice_queue_length{queue}                per configured queue, as last read (a scrape
//	                                          reads them, waiting at most the timeout):
//	sluice_queue_pending{queue}               entries queued, delivered and not acked,
//	sluice_queue_capacity{queue}              its capacity, workers in its group, dead
//	sluice_queue_consumers{queue}             letters, entries admitted and acked, and
//	sluice_queue_dead_letters{queue}          entries leaving per second (last 10-20 s)
//	sluice_queue_admitted_total{queue}
//	sluice_queue_acked_total{queue}
//	sluice_queue_drain_rate{queue}
//	sluice_quota_granted_total                requests granted to gRPC clients as quota
//	sluice_unmatched_paths_total              paths (and descriptors) that matched no limit
//	sluice_over_limit_cache_hits_total        checks denied from the over-limit cache (Redis
//	sluice_over_limit_cache_entries           store, redis.over_limit_cache), and the
//	                                          denials it holds
//	sluice_leased_keys                        keys followed for leases (Redis store,
//	sluice_leased_units                       redis.lease_for), and the units live
//	                                          leases hold unused
//
// plus the Go runtime and process collectors.
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
//	GET    /admin/v1/consumers?path=…  who consumed each level recently (consumersJSON)
//
// See consumer for what the consumers lists record.
//
// # gRPC
//
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, so that
// Envoy, Istio or any proxy that speaks it can use Sluice, and
// grpc.health.v1.Health (SERVING until shutdown, for "" and the rate limit
// service's name).
//
// Mapping. A descriptor of domain D with entries (k1, v1) … (kn, vn) is
// the policy path [D, k1, v1, …, kn, vn] (see descriptorPath): domain,
// then each entry's key and value as two segments. An entry with an empty
// value still contributes an empty value segment, which only a "*" child
// matches, as Envoy's service falls back to the key-only descriptor.
//
// Matching is Envoy's: a descriptor is limited by the limits of the one
// node its whole path reaches, and only those. Nodes above it on the walk
// do not apply (send them as descriptors of their own, as with Envoy), and
// a descriptor whose path stops early (an entry that matches no child) is
// not limited. A named child wins over "*", as key_value wins over a
// key-only descriptor in Envoy's configuration; `sluice import-envoy`
// writes exactly such a tree. A descriptor that reaches an unlimited node
// is OK with limit_remaining 2^32-1, as in Envoy's service. Under
// unmatched: deny, a descriptor that reaches no node with limits is
// OVER_LIMIT.
//
// Counting. hits_addend is the cost: the request's (0, which proto3 cannot
// tell from unset, means 1, as in Envoy's service) unless a descriptor sets
// its own hits_addend, where 0 checks without consuming. A descriptor
// with is_negative_hits gives hits_addend back (policy.Checker.Adjust):
// concurrency slots are released, and rate limits that count both ways
// (every kind but gate and concurrency) get the units back,
// never beyond an empty state. A node with debt: true records a charge in
// full even past its limit (algo.Debt), which is how a cost known only when
// the stream ends (apply_on_stream_done with a hits_addend from response
// metadata) is metered without loss. A descriptor given back and the same
// descriptor charged in one request are a settle: one change of their
// difference (see negativeHits). Every limit of every descriptor is decided
// in one all-or-nothing DecideAll: a request that is over limit on one
// descriptor consumes nothing on the others (Envoy's service counts each
// descriptor on its own), and overall_code is OVER_LIMIT when any enforced
// descriptor is. Descriptors naming the same key add their costs.
// A descriptor's own limit (RateLimitDescriptor.limit, as Envoy Gateway
// sets per tenant) is honoured on a node that says request_limit: {max,
// window}, within that bound as a rate (above it: INVALID_ARGUMENT), as a
// fixed window of requests_per_unit per unit on a key of its unit; on a
// node without request_limit it is ignored, counted in
// sluice_request_limits_ignored_total and logged.
//
// Answers. Each DescriptorStatus has its code, current_limit (the steady
// rate of its most restrictive limit as requests per unit, named by the
// node's name, Envoy's rate_limit name for an imported policy, else its
// pattern; exact for fixed_window limits of a whole unit, which is
// what import-envoy writes), limit_remaining and duration_until_reset (the
// time until the limit is back to full). response_headers_to_add carries
// the RateLimit-Policy and RateLimit fields for every enforced level, and
// Retry-After when over limit. A shadow level (Envoy's shadow_mode) is
// reported in its status's numbers but its code stays OK.
//
// When the store fails or times out, the answer follows on_store_error:
// OK everywhere (fail open) or OVER_LIMIT everywhere (fail closed), within
// the decision timeout; it is not a gRPC error, so Envoy's own
// failure_mode_deny does not come into play.
//
// Quota: a client that admits requests on its own may ask for quota with
// the request metadata x-sluice-quota: N (quotaHeader; Envoy sends it
// with the rate limit service's grpc_service initial_metadata). When the
// check is OK, every descriptor's limits are on nodes with lease: true and
// the store is Redis, the response's quota grants up to N (at most
// redis.max_lease) more requests of the same descriptor set, valid until
// no later than redis.lease_for from now and the end of every fixed
// window involved: they are counted in their windows at once, so the
// windows never admit more than their limits; what the client leaves
// unused is lost to the windows until they end. The grant is smaller, or
// none, when the windows are near their limits (see store/redis).
// sluice_quota_granted_total counts the requests granted.
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
