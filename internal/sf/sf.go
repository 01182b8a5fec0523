// Package sf serializes HTTP Structured Field values (RFC 9651, which
// obsoletes RFC 8941) as far as the RateLimit fields need them: Lists of
// Items whose bare items are Integers, Strings, Tokens, Booleans or Byte
// Sequences, with Parameters. It appends to a caller's buffer and allocates
// nothing itself.
//
// Every function validates its input as RFC 9651 §4.1 requires and fails
// rather than emit an invalid field: on error it returns the buffer as it
// was, unchanged, and an error wrapping ErrInvalid.
package sf

import (
	"encoding/base64"
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

// AppendInteger appends an Integer: an optional '-' and 1 to 15 digits.
func AppendInteger(b []byte, v int64) ([]byte, error) {
	if v > MaxInteger || v < -MaxInteger {
		return b, &sfError{what: "integer " + strconv.FormatInt(v, 10) + " out of range", at: -1}
	}
	return strconv.AppendInt(b, v, 10), nil
}

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

// AppendToken appends a Token: ( ALPHA / "*" ) *( tchar / ":" / "/" ).
func AppendToken(b []byte, t string) ([]byte, error) {
	if t == "" {
		return b, &sfError{what: "empty token", at: -1}
	}
	if c := t[0]; !isAlpha(c) && c != '*' {
		return b, &sfError{what: "token must start with a letter or '*'", at: 0}
	}
	for i := 1; i < len(t); i++ {
		if c := t[i]; !isTchar(c) && c != ':' && c != '/' {
			return b, &sfError{what: "token byte " + strconv.QuoteRuneToASCII(rune(c)) + " is not allowed", at: i}
		}
	}
	return append(b, t...), nil
}

// AppendBoolean appends a Boolean: ?1 or ?0.
func AppendBoolean(b []byte, v bool) []byte {
	if v {
		return append(b, "?1"...)
	}
	return append(b, "?0"...)
}

// AppendByteSequence appends a Byte Sequence: p in base64 (RFC 4648, with
// padding) between colons.
func AppendByteSequence(b []byte, p []byte) []byte {
	b = append(b, ':')
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, ':')
}

// AppendKey appends a parameter or dictionary key:
// ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
func AppendKey(b []byte, k string) ([]byte, error) {
	if err := ValidKey(k); err != nil {
		return b, err
	}
	return append(b, k...), nil
}

// ValidKey reports whether k is a valid key.
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

// AppendMemberSeparator appends the separator between List members, ", ",
// unless b is empty, so that members can be appended in a loop.
func AppendMemberSeparator(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	return append(b, ", "...)
}

// AppendParamInteger appends the parameter ;key=v.
func AppendParamInteger(b []byte, key string, v int64) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return b, err
	}
	if v > MaxInteger || v < -MaxInteger {
		return b, &sfError{what: "parameter " + key + ": integer " + strconv.FormatInt(v, 10) + " out of range", at: -1}
	}
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, v, 10), nil
}

// AppendParamString appends the parameter ;key="s".
func AppendParamString(b []byte, key, s string) ([]byte, error) {
	return appendParam(b, key, s, AppendString)
}

// AppendParamToken appends the parameter ;key=t.
func AppendParamToken(b []byte, key, t string) ([]byte, error) {
	return appendParam(b, key, t, AppendToken)
}

// appendParam appends ;key= and the value encoded by enc, or nothing when
// the key or the value is invalid.
func appendParam(b []byte, key, v string, enc func([]byte, string) ([]byte, error)) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return b, err
	}
	n := len(b)
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	b2, err := enc(b, v)
	if err != nil {
		return b[:n], err
	}
	return b2, nil
}

// AppendParamBoolean appends the parameter ;key when v is true (a true
// Boolean's value is left out) and ;key=?0 when it is false.
func AppendParamBoolean(b []byte, key string, v bool) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return b, err
	}
	b = append(b, ';')
	b = append(b, key...)
	if !v {
		b = append(b, "=?0"...)
	}
	return b, nil
}

// AppendParamByteSequence appends the parameter ;key=:base64:.
func AppendParamByteSequence(b []byte, key string, p []byte) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return b, err
	}
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return AppendByteSequence(b, p), nil
}

func isAlpha(c byte) bool   { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isLcalpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool   { return '0' <= c && c <= '9' }

// isTchar reports whether c is an RFC 9110 tchar.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
