// Package server is `sluice serve`: rate-limit decisions over HTTP/JSON,
// as Envoy's rate limit service over gRPC (envoy.service.ratelimit.v3) and
// as forward-auth for reverse proxies, on one store (memory or Redis) and
// one policy (limits.yaml, package policy) that reloads, with admission
// queues, Prometheus metrics and an admin API.
//
// Every API decides the paths of one request as one all-or-nothing
// decision (policy.Checker), and an answer's status means one thing here
// and in package httplimit. docs/service.md is the reference for the
// endpoints, their answers, the gRPC mapping and the metrics; a test
// keeps its lists of endpoints and metrics equal to what Handler and the
// metrics register.
package server
