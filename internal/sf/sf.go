// Package sf writes the parts of HTTP Structured Field values (RFC 9651,
// which obsoletes RFC 8941) that the RateLimit fields need and package
// headers does not write with strconv: Strings (a level's name), the keys
// of Parameters (checked once, when headers names them), and the bound of
// an Integer. It appends to a caller's buffer and allocates nothing.
//
// Every function validates its input as RFC 9651 §4.1 requires and fails
// rather than emit an invalid field: on error it returns the buffer as it
// was, unchanged, and an error wrapping ErrInvalid.
package sf

import (
	"errors"
	"strconv"
)

// ErrInvalid is wrapped by every serialization error.
var ErrInvalid = errors.New("sf: invalid value")

// MaxInteger is the largest magnitude of an Integer: 15 decimal digits.
const MaxInteger = 999_999_999_999_999

type sfError struct {
	what string
	at   int // byte index of the fault, or -1
}

func (e *sfError) Error() string {
	if e.at >= 0 {
		return ErrInvalid.Error() + ": " + e.what + " at byte " + strconv.Itoa(e.at)
	}
	return ErrInvalid.Error() + ": " + e.what
}

func (e *sfError) Unwrap() error { return ErrInvalid }

// AppendString appends a String: s between double quotes, with '"' and '\'
// escaped by a backslash. Only printable ASCII (0x20 to 0x7E) is allowed.
func AppendString[S ~string | ~[]byte](b []byte, s S) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return b, &sfError{what: "string byte " + strconv.QuoteRuneToASCII(rune(c)) + " is not printable ASCII", at: i}
		}
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"'), nil
}

// ValidKey reports whether k is a valid key: a lowercase letter or '*',
// then lowercase letters, digits, '_', '-', '.' and '*'.
func ValidKey(k string) error {
	if k == "" {
		return &sfError{what: "empty key", at: -1}
	}
	if c := k[0]; !isLcalpha(c) && c != '*' {
		return &sfError{what: "key " + strconv.Quote(k) + " must start with a lowercase letter or '*'", at: 0}
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; !isLcalpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			return &sfError{what: "key " + strconv.Quote(k) + " has a byte that is not allowed", at: i}
		}
	}
	return nil
}

func isLcalpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
