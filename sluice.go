// Package sluice is a rate limiter with one decision API over several
// algorithms (package algo) and several stores: an embedded in-memory store
// (package store/memory) and Redis (package store/redis), which give the
// same answers for the same traces.
//
// A Limiter is one limit over a store, deciding for any number of keys:
//
//	lim, err := sluice.NewLimiter(memory.New(), algo.GCRA{Burst: 15, Count: 30, Period: time.Minute})
//	ok, err := lim.Allow(ctx, sluice.Key("user", "alex"))
package sluice

import (
	"strings"

	"github.com/sluicehq/sluice/internal/keys"
)

// Key joins parts with ':' after escaping each part, so that distinct part
// lists always give distinct keys: '%', ':', '#', '{' and '}' in a part are
// percent-encoded ('#' is left free to separate a key from a limit
// index). A caller id such as "alex:trade" or "{alex}" can therefore never
// produce another caller's key or choose a Redis Cluster hash tag. A key of
// one part is that part escaped.
func Key(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(keys.Escape(p))
	}
	return b.String()
}
