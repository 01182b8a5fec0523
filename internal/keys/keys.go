// Package keys escapes the parts of a state key, for sluice.Key, the
// policy's paths and the Redis store's queue names alike.
package keys

import "strings"

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
