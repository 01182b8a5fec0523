// Package envoydiff checks, request by request, that Sluice started as
// envoyproxy/ratelimit (its /bin/ratelimit, with that service's
// variables) answers as envoyproxy/ratelimit itself does: each built from
// source (Sluice from this checkout, envoyproxy/ratelimit from its Go
// module at the version bench/cmd/envoyrl pins), each on its own
// redis-server, on the same configuration directory, sent the same seeded
// gRPC ShouldRateLimit sequences, every decision field compared. It is a
// module of its own so that envoyproxy/ratelimit's dependencies stay out of
// Sluice's; it has no code but its test (go test, here).
package envoydiff
