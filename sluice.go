// Package sluice is a rate limiter with one decision API over several
// algorithms (package algo) and several stores: an embedded in-memory store
// (package store/memory) and Redis (package store/redis), which give the
// same answers for the same traces.
//
// A decision names a key, a limit and a cost:
//
//	st := memory.New()
//	res, err := st.Decide(ctx, store.Request{
//		Key:   "user:alex",
//		Limit: algo.GCRA{Burst: 15, Count: 30, Period: time.Minute},
//		Cost:  1,
//	})
package sluice

import (
	"strings"
)

// Key joins parts with ':' after escaping each part, so that distinct part
// lists always give distinct keys: '%', ':', '#', '{' and '}' in a part are
// percent-encoded ('#' is left free to separate a key from a limit index). A caller id such as "alex:trade" or "{alex}" can
// therefore never produce another caller's key or choose a Redis Cluster
// hash tag.
func Key(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(Escape(p))
	}
	return b.String()
}

// Escape percent-encodes '%', ':', '#', '{' and '}' in s. It returns s itself
// when there is nothing to escape.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', ':', '#', '{', '}':
			const hex = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// needsEscape reports whether s holds a byte Escape encodes; a loop over
// the bytes, where strings.ContainsAny takes a slower general path.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%', ':', '#', '{', '}':
			return true
		}
	}
	return false
}
