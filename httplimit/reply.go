package httplimit

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
)

// The reply of a script limiter's script (NewScript) is {"allow"|"deny",
// {items...}}. The items that are a string or an integer are header
// values, which line up, in order, with ScriptConfig.Headers: there must
// be exactly one per name, and an empty string leaves its header unset. An
// item that is a {name, value} pair sets a header of its own, and may come
// anywhere. Names must be HTTP tokens other than Content-Length,
// Transfer-Encoding, Connection and Trailer; values may not hold control
// characters other than tab. A reply that breaks the contract is an error
// wrapping ErrBadReply; like a store error it is a failed check, handled
// by Options.Failure.

// ErrBadReply is wrapped by the error of a script reply that breaks the
// contract; the error names the script, the part at fault (such as
// "reply[2][3]") and what is wrong with it.
var ErrBadReply = errors.New("script reply breaks the contract")

// The ways a reply can break the contract, each wrapped beside ErrBadReply.
var (
	// errReplyShape: the reply is not an array of two elements.
	errReplyShape = errors.New(`reply is not {verdict, items}`)
	// errReplyVerdict: the first element is not "allow" or "deny".
	errReplyVerdict = errors.New(`verdict is not "allow" or "deny"`)
	// errReplyValues: the second element is not an array, or its header
	// values do not line up with the header names.
	errReplyValues = errors.New("header values do not line up with the header names")
	// errReplyHeader: a value is not a string or an integer or holds a
	// control character, or a pair is not two strings naming an allowed
	// header.
	errReplyHeader = errors.New("bad header item")
)

// scriptReply is a script's reply, read by the contract.
type scriptReply struct {
	allow   bool
	headers []headerField // in order
}

// headerField is one header a script's reply sets.
type headerField struct {
	name  string // canonical
	value string
}

// parseReply reads the reply v of the script named script, whose header
// values line up with names (canonical), by the contract.
func parseReply(script string, names []string, v any) (scriptReply, error) {
	bad := func(where string, kind error, format string, a ...any) (scriptReply, error) {
		return scriptReply{}, fmt.Errorf("userscript: %s: %w: %s: %w: %s", script, ErrBadReply, where, kind, fmt.Sprintf(format, a...))
	}
	top, ok := v.([]any)
	if !ok {
		return bad("reply", errReplyShape, "got %s", describe(v))
	}
	if len(top) != 2 {
		return bad("reply", errReplyShape, "got an array of %d elements", len(top))
	}
	var rep scriptReply
	switch verdict, _ := top[0].(string); {
	case verdict == "allow":
		rep.allow = true
	case verdict == "deny":
	default:
		return bad("reply[1]", errReplyVerdict, "got %s", describe(top[0]))
	}
	items, ok := top[1].([]any)
	if !ok {
		return bad("reply[2]", errReplyValues, "got %s, want an array", describe(top[1]))
	}
	rep.headers = make([]headerField, 0, len(items))
	var pairs []headerField
	values := 0
	for i, it := range items {
		where := "reply[2][" + strconv.Itoa(i+1) + "]"
		if pair, isPair := it.([]any); isPair {
			if len(pair) != 2 {
				return bad(where, errReplyHeader, "a pair must have 2 elements, got %d", len(pair))
			}
			name, ok := pair[0].(string)
			if !ok || !validToken(name) {
				return bad(where+"[1]", errReplyHeader, "header name %s is not an HTTP token", describe(pair[0]))
			}
			name = textproto.CanonicalMIMEHeaderKey(name)
			if framingHeader(name) {
				return bad(where+"[1]", errReplyHeader, "a script may not set %s", name)
			}
			value, ok := fieldValue(pair[1])
			if !ok {
				return bad(where+"[2]", errReplyHeader, "value of %s: %s", name, describeValue(pair[1]))
			}
			pairs = append(pairs, headerField{name, value})
			continue
		}
		value, ok := fieldValue(it)
		if !ok {
			return bad(where, errReplyHeader, "%s", describeValue(it))
		}
		if values >= len(names) {
			return bad(where, errReplyValues, "more than the %d header values configured (%s)", len(names), strings.Join(names, ", "))
		}
		if value != "" {
			rep.headers = append(rep.headers, headerField{names[values], value})
		}
		values++
	}
	if values != len(names) {
		return bad("reply[2]", errReplyValues, "%d header values for the %d header names (%s)", values, len(names), strings.Join(names, ", "))
	}
	rep.headers = append(rep.headers, pairs...)
	return rep, nil
}

// headerNames returns names canonical, or an error for one a script may
// not set: not an HTTP token, or a framing header.
func headerNames(names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		if !validToken(n) {
			return nil, fmt.Errorf("header name %q is not an HTTP token", n)
		}
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
		if framingHeader(out[i]) {
			return nil, fmt.Errorf("a script may not set %s", out[i])
		}
	}
	return out, nil
}

// fieldValue returns a reply item as a header value: a string without
// control characters (tab allowed), or an integer.
func fieldValue(v any) (string, bool) {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10), true
	case string:
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return "", false
			}
		}
		return v, true
	}
	return "", false
}

func describeValue(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("value %q holds a control character", s)
	}
	return "got " + describe(v) + ", want a string or an integer"
}

// describe names a reply element's type (and short value) for an error.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil (a Lua nil or false)"
	case int64:
		return "integer " + strconv.FormatInt(v, 10)
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return "string " + strconv.Quote(v)
	case []any:
		return "an array of " + strconv.Itoa(len(v))
	case float64:
		return "a double"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a map"
	}
	return "an unexpected reply type"
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// framingHeader reports whether a script may not set the header because
// the server frames the response with it.
func framingHeader(canonical string) bool {
	switch canonical {
	case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
		return true
	}
	return false
}
