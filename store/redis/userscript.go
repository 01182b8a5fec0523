package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// A UserScript is a user-supplied Lua limiter (a store.Script), loaded
// into Redis at start-up by Store.LoadScript and run with EVALSHA for
// every request: the scripts Sluice's own algorithms run are in scripts/,
// embedded. Its contract:
//
//   - KEYS[1] is the request's key; the httplimit middleware passes its
//     ScriptConfig.Prefix followed by the request's policy path joined
//     with sluice.Key, so "sluice:lua:api:alex" for the path [api alex].
//     One key, so that the script runs on Redis Cluster too.
//   - ARGV are the script's arguments; the middleware passes its
//     ScriptConfig.Args, with "$cost" replaced by the request's cost.
//   - The reply is {"allow"|"deny", {items...}}. The items that are a
//     string or an integer are header values, which line up, in order,
//     with the header names given to Load: there must be exactly
//     one per name, and an empty string leaves its header unset. An item
//     that is a {name, value} pair sets a header of its own, and may come
//     anywhere. Names must be HTTP tokens other than Content-Length,
//     Transfer-Encoding, Connection and Trailer; values may not hold
//     control characters other than tab.
//
// A reply that breaks the contract is a *ReplyError; like a Redis error
// it is a failed check (for the middleware: handled by its
// Options.Failure). examples/window_from_first.lua and
// examples/token_bucket.lua in this package's directory are examples.
type UserScript struct {
	file  string
	name  string
	sha   string
	names []string // canonical header names
	lua   *rueidis.Lua
	s     *Store
}

var _ store.Script = (*UserScript)(nil)

// LoadScript reads a Lua script file and loads it (SCRIPT LOAD) into every
// node of the store's Redis: on Redis Cluster, every node the client
// knows. A file
// that cannot be read, or that Redis does not accept (such as a syntax
// error), is an error naming the file and carrying Redis's message: a
// start-up error. A node that restarts, or joins later, gets the script
// again when EVALSHA answers NOSCRIPT (rueidis sends EVAL then).
//
// headerNames are the headers whose values the script's reply gives, in
// order.
func (s *Store) LoadScript(ctx context.Context, file string, headerNames []string) (*UserScript, error) {
	client, err := s.clientOrErr()
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", file, err)
	}
	names := make([]string, len(headerNames))
	for i, n := range headerNames {
		if !validToken(n) {
			return nil, fmt.Errorf("userscript: %s: header name %q is not an HTTP token", file, n)
		}
		names[i] = textproto.CanonicalMIMEHeaderKey(n)
		if framingHeader(names[i]) {
			return nil, fmt.Errorf("userscript: %s: a script may not set %s", file, names[i])
		}
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", file, err)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	for addr, node := range client.Nodes() {
		got, err := node.Do(ctx, node.B().ScriptLoad().Script(string(src)).Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("userscript: load %s into %s: %w", file, addr, err)
		}
		if got != sha {
			return nil, fmt.Errorf("userscript: load %s into %s: Redis named it %s, want SHA-1 %s", file, addr, got, sha)
		}
	}
	return &UserScript{
		file:  file,
		name:  filepath.Base(file),
		sha:   sha,
		names: names,
		lua:   rueidis.NewLuaScript(string(src)), // the operator's own file
		s:     s,
	}, nil
}

// Name returns the base name of the script's file: the name a check by
// it goes by.
func (u *UserScript) Name() string { return u.name }

// File returns the script's file name, as given to Load.
func (u *UserScript) File() string { return u.file }

// SHA1 returns the script's SHA-1, the name EVALSHA calls it by.
func (u *UserScript) SHA1() string { return u.sha }

// Errors a ReplyError wraps, one per way a reply can break the contract.
// Every ReplyError also wraps ErrBadReply.
var (
	ErrBadReply = errors.New("script reply breaks the contract")
	// ErrReplyShape: the reply is not an array of two elements.
	ErrReplyShape = errors.New(`reply is not {verdict, items}`)
	// ErrReplyVerdict: the first element is not "allow" or "deny".
	ErrReplyVerdict = errors.New(`verdict is not "allow" or "deny"`)
	// ErrReplyValues: the second element is not an array, or its header
	// values do not line up with the header names.
	ErrReplyValues = errors.New("header values do not line up with the header names")
	// ErrReplyHeader: a value is not a string or an integer or holds a
	// control character, or a pair is not two strings naming an allowed
	// header.
	ErrReplyHeader = errors.New("bad header item")
)

// ReplyError is a script reply that breaks the contract.
type ReplyError struct {
	Script string // the script's file
	Where  string // the part at fault, such as "reply[2][3]"
	Kind   error  // ErrReplyShape, ErrReplyVerdict, ErrReplyValues or ErrReplyHeader
	Detail string
}

func (e *ReplyError) Error() string {
	return "userscript: " + e.Script + ": " + ErrBadReply.Error() + ": " + e.Where + ": " + e.Kind.Error() + ": " + e.Detail
}

// Unwrap returns ErrBadReply and the error's Kind.
func (e *ReplyError) Unwrap() []error { return []error{ErrBadReply, e.Kind} }

// Run runs the script once with EVALSHA (EVAL after NOSCRIPT) and returns
// its validated reply. A Redis error, such as a runtime error in the
// script, names the script.
func (u *UserScript) Run(ctx context.Context, keys, args []string) (store.ScriptReply, error) {
	c, err := u.s.clientOrErr()
	if err != nil {
		return store.ScriptReply{}, fmt.Errorf("userscript: %s: %w", u.file, err)
	}
	m, err := u.lua.Exec(ctx, c, keys, args).ToMessage()
	if rueidis.IsRedisNil(err) {
		return store.ScriptReply{}, &ReplyError{Script: u.file, Where: "reply", Kind: ErrReplyShape, Detail: "got nil (a Lua nil or false)"}
	}
	if err != nil {
		return store.ScriptReply{}, fmt.Errorf("userscript: %s: %w", u.file, err)
	}
	return u.parseReply(&m)
}

func (u *UserScript) parseReply(m *rueidis.RedisMessage) (store.ScriptReply, error) {
	bad := func(where string, kind error, format string, a ...any) (store.ScriptReply, error) {
		return store.ScriptReply{}, &ReplyError{Script: u.file, Where: where, Kind: kind, Detail: fmt.Sprintf(format, a...)}
	}
	if !m.IsArray() {
		return bad("reply", ErrReplyShape, "got %s", describe(m))
	}
	top, _ := m.ToArray()
	if len(top) != 2 {
		return bad("reply", ErrReplyShape, "got an array of %d elements", len(top))
	}
	var rep store.ScriptReply
	switch v, err := top[0].ToString(); {
	case err != nil:
		return bad("reply[1]", ErrReplyVerdict, "got %s", describe(&top[0]))
	case v == "allow":
		rep.Allow = true
	case v == "deny":
	default:
		return bad("reply[1]", ErrReplyVerdict, "got %q", v)
	}
	if !top[1].IsArray() {
		return bad("reply[2]", ErrReplyValues, "got %s, want an array", describe(&top[1]))
	}
	items, _ := top[1].ToArray()
	rep.Headers = make([]store.HeaderField, 0, len(items))
	var pairs []store.HeaderField
	values := 0
	for i := range items {
		it := &items[i]
		where := "reply[2][" + strconv.Itoa(i+1) + "]"
		if it.IsArray() {
			pair, _ := it.ToArray()
			if len(pair) != 2 {
				return bad(where, ErrReplyHeader, "a pair must have 2 elements, got %d", len(pair))
			}
			name, err := pair[0].ToString()
			if err != nil || !validToken(name) {
				return bad(where+"[1]", ErrReplyHeader, "header name %s is not an HTTP token", describe(&pair[0]))
			}
			name = textproto.CanonicalMIMEHeaderKey(name)
			if framingHeader(name) {
				return bad(where+"[1]", ErrReplyHeader, "a script may not set %s", name)
			}
			value, ok := fieldValue(&pair[1])
			if !ok {
				return bad(where+"[2]", ErrReplyHeader, "value of %s: %s", name, describeValue(&pair[1]))
			}
			pairs = append(pairs, store.HeaderField{Name: name, Value: value})
			continue
		}
		value, ok := fieldValue(it)
		if !ok {
			return bad(where, ErrReplyHeader, "%s", describeValue(it))
		}
		if values >= len(u.names) {
			return bad(where, ErrReplyValues, "more than the %d header values configured (%s)", len(u.names), strings.Join(u.names, ", "))
		}
		if value != "" {
			rep.Headers = append(rep.Headers, store.HeaderField{Name: u.names[values], Value: value})
		}
		values++
	}
	if values != len(u.names) {
		return bad("reply[2]", ErrReplyValues, "%d header values for the %d header names (%s)", values, len(u.names), strings.Join(u.names, ", "))
	}
	rep.Headers = append(rep.Headers, pairs...)
	return rep, nil
}

// fieldValue returns a reply item as a header value: a string without
// control characters (tab allowed), or an integer.
func fieldValue(m *rueidis.RedisMessage) (string, bool) {
	if m.IsInt64() {
		v, _ := m.ToInt64()
		return strconv.FormatInt(v, 10), true
	}
	if !m.IsString() {
		return "", false
	}
	v, _ := m.ToString()
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return v, true
}

func describeValue(m *rueidis.RedisMessage) string {
	if m.IsString() {
		v, _ := m.ToString()
		return fmt.Sprintf("value %q holds a control character", v)
	}
	return "got " + describe(m) + ", want a string or an integer"
}

// describe names a reply element's type (and short value) for an error.
func describe(m *rueidis.RedisMessage) string {
	switch {
	case m.IsNil():
		return "nil (a Lua nil or false)"
	case m.IsInt64():
		v, _ := m.ToInt64()
		return "integer " + strconv.FormatInt(v, 10)
	case m.IsString():
		v, _ := m.ToString()
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return "string " + strconv.Quote(v)
	case m.IsArray():
		a, _ := m.ToArray()
		return "an array of " + strconv.Itoa(len(a))
	case m.IsFloat64():
		return "a double"
	case m.IsBool():
		return "a boolean"
	case m.IsMap():
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
