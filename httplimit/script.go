package httplimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// A Script is a user-supplied Lua limiter, loaded into Redis at start-up
// and run with EVALSHA for every request. Its contract:
//
//   - KEYS[1] is the request's key: ScriptConfig.Prefix followed by the
//     request's policy path (Options.Path) joined with sluice.Key, so
//     "sluice:lua:api:alex" for the path [api alex]. One key, so that the
//     script runs on Redis Cluster too.
//   - ARGV are the options from the config (ScriptConfig.Args), in order;
//     an argument that is exactly "$cost" is the request's cost in decimal.
//   - The reply is {"allow"|"deny", {items...}}. The items that are a
//     string or an integer are header values, which line up, in order,
//     with the header names given to LoadScript: there must be exactly
//     one per name, and an empty string leaves its header unset. An item
//     that is a {name, value} pair sets a header of its own, and may come
//     anywhere. Names must be HTTP tokens other than Content-Length,
//     Transfer-Encoding, Connection and Trailer; values may not hold
//     control characters other than tab.
//
// A reply that breaks the contract is a *ReplyError; like a Redis error
// it is a failed check, handled by Options.Failure. scripts/fixed_window.lua
// and scripts/token_bucket.lua in this package's directory are examples.
type Script struct {
	file   string
	name   string
	sha    string
	names  []string // canonical header names
	lua    *rueidis.Lua
	client rueidis.Client
}

// LoadScript reads a Lua script file and loads it (SCRIPT LOAD) into every
// node of client: on Redis Cluster, every node the client knows. A file
// that cannot be read, or that Redis does not accept (such as a syntax
// error), is an error naming the file and carrying Redis's message: a
// start-up error. A node that restarts, or joins later, gets the script
// again when EVALSHA answers NOSCRIPT (rueidis sends EVAL then).
//
// headerNames are the headers whose values the script's reply gives, in
// order.
func LoadScript(ctx context.Context, client rueidis.Client, file string, headerNames []string) (*Script, error) {
	names := make([]string, len(headerNames))
	for i, n := range headerNames {
		if !validToken(n) {
			return nil, fmt.Errorf("httplimit: script %s: header name %q is not an HTTP token", file, n)
		}
		names[i] = textproto.CanonicalMIMEHeaderKey(n)
		if framingHeader(names[i]) {
			return nil, fmt.Errorf("httplimit: script %s: a script may not set %s", file, names[i])
		}
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("httplimit: script %s: %w", file, err)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	for addr, node := range client.Nodes() {
		got, err := node.Do(ctx, node.B().ScriptLoad().Script(string(src)).Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("httplimit: load script %s into %s: %w", file, addr, err)
		}
		if got != sha {
			return nil, fmt.Errorf("httplimit: load script %s into %s: Redis named it %s, want SHA-1 %s", file, addr, got, sha)
		}
	}
	return &Script{
		file:   file,
		name:   filepath.Base(file),
		sha:    sha,
		names:  names,
		lua:    rueidis.NewLuaScript(string(src)),
		client: client,
	}, nil
}

// File returns the script's file name, as given to LoadScript.
func (s *Script) File() string { return s.file }

// SHA1 returns the script's SHA-1, the name EVALSHA calls it by.
func (s *Script) SHA1() string { return s.sha }

// HeaderField is one header a script's reply sets.
type HeaderField struct {
	Name  string // canonical
	Value string
}

// Reply is a script's validated reply.
type Reply struct {
	Allow bool
	// Headers are the headers to set, the lined-up values first (less the
	// empty ones), then the pairs, in the order of the reply.
	Headers []HeaderField
}

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
	return "httplimit: script " + e.Script + ": " + ErrBadReply.Error() + ": " + e.Where + ": " + e.Kind.Error() + ": " + e.Detail
}

// Unwrap returns ErrBadReply and the error's Kind.
func (e *ReplyError) Unwrap() []error { return []error{ErrBadReply, e.Kind} }

// Run runs the script once with EVALSHA (EVAL after NOSCRIPT) and returns
// its validated reply. A Redis error, such as a runtime error in the
// script, names the script.
func (s *Script) Run(ctx context.Context, keys, args []string) (Reply, error) {
	res := s.lua.Exec(ctx, s.client, keys, args)
	m, err := res.ToMessage()
	if rueidis.IsRedisNil(err) {
		return Reply{}, &ReplyError{Script: s.file, Where: "reply", Kind: ErrReplyShape, Detail: "got nil (a Lua nil or false)"}
	}
	if err != nil {
		return Reply{}, fmt.Errorf("httplimit: script %s: %w", s.file, err)
	}
	return s.parseReply(&m)
}

func (s *Script) parseReply(m *rueidis.RedisMessage) (Reply, error) {
	bad := func(where string, kind error, format string, a ...any) (Reply, error) {
		return Reply{}, &ReplyError{Script: s.file, Where: where, Kind: kind, Detail: fmt.Sprintf(format, a...)}
	}
	if !m.IsArray() {
		return bad("reply", ErrReplyShape, "got %s", describe(m))
	}
	top, _ := m.ToArray()
	if len(top) != 2 {
		return bad("reply", ErrReplyShape, "got an array of %d elements", len(top))
	}
	var rep Reply
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
	rep.Headers = make([]HeaderField, 0, len(items))
	var pairs []HeaderField
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
			pairs = append(pairs, HeaderField{name, value})
			continue
		}
		value, ok := fieldValue(it)
		if !ok {
			return bad(where, ErrReplyHeader, "%s", describeValue(it))
		}
		if values >= len(s.names) {
			return bad(where, ErrReplyValues, "more than the %d header values configured (%s)", len(s.names), strings.Join(s.names, ", "))
		}
		if value != "" {
			rep.Headers = append(rep.Headers, HeaderField{s.names[values], value})
		}
		values++
	}
	if values != len(s.names) {
		return bad("reply[2]", ErrReplyValues, "%d header values for the %d header names (%s)", values, len(s.names), strings.Join(s.names, ", "))
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

// ScriptKeyPrefix is the default ScriptConfig.Prefix.
const ScriptKeyPrefix = "sluice:lua:"

// CostArg is the script argument that stands for the request's cost.
const CostArg = "$cost"

// ScriptConfig configures a script limiter.
type ScriptConfig struct {
	// Args are the script's ARGV; an argument equal to CostArg is the
	// request's cost.
	Args []string
	// Prefix is put before every key (ScriptKeyPrefix when empty). It may
	// not contain '{' or '}', which would pick a Redis Cluster hash tag.
	Prefix string
}

type scriptLimit struct {
	s      *Script
	args   []string
	cost   []int // indexes of CostArg in args
	prefix string
}

// NewScriptLimiter returns a Limiter that decides requests with a Lua
// script instead of a Checker. Options work as for New, except that the
// headers are the script's (Options.Headers is ignored), and that
// OnLimited and OnDecision get a Decision with one Level, named after the
// script's file, whose RetryAfter is the script's Retry-After header when
// it sets one in delta-seconds (0, unknown, when not). It panics if s is
// nil or cfg.Prefix holds a brace.
func NewScriptLimiter(s *Script, cfg ScriptConfig, opts Options) *Limiter {
	if s == nil {
		panic("httplimit: nil Script")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = ScriptKeyPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		panic("httplimit: script key prefix " + strconv.Quote(cfg.Prefix) + " may not contain '{' or '}'")
	}
	sl := &scriptLimit{s: s, args: append([]string(nil), cfg.Args...), prefix: cfg.Prefix}
	for i, a := range sl.args {
		if a == CostArg {
			sl.cost = append(sl.cost, i)
		}
	}
	l := &Limiter{script: sl}
	l.setOptions(opts)
	return l
}

func (l *Limiter) serveScript(w http.ResponseWriter, r *http.Request, next http.Handler) {
	sl := l.script
	key, err := l.opts.Key(r)
	if err != nil {
		l.opts.OnBadRequest(w, r, err)
		return
	}
	var pathBuf [8]string
	path := pathBuf[:0]
	if l.opts.Path != nil {
		path = l.opts.Path(r, key, path)
	} else {
		path = append(path, key)
	}
	k := sl.prefix + sluice.Key(path...)
	if len(path) == 0 || len(k) > len(sl.prefix)+sluice.MaxKeyLen {
		l.opts.OnBadRequest(w, r, fmt.Errorf("%w: script key of %d bytes exceeds %d", sluice.ErrBadRequest, len(k)-len(sl.prefix), sluice.MaxKeyLen))
		return
	}
	args := sl.args
	if len(sl.cost) > 0 {
		cost := int64(1)
		if l.opts.Cost != nil {
			cost = l.opts.Cost(r)
		}
		if cost < 0 {
			l.opts.OnBadRequest(w, r, fmt.Errorf("%w: negative cost %d", sluice.ErrBadRequest, cost))
			return
		}
		args = append([]string(nil), args...)
		for _, i := range sl.cost {
			args[i] = strconv.FormatInt(cost, 10)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.timeout)
	rep, err := sl.s.Run(ctx, []string{k}, args)
	cancel()
	if err != nil {
		l.failed(w, r, next, err)
		return
	}
	h := w.Header()
	var retry time.Duration
	for _, f := range rep.Headers {
		h[f.Name] = []string{f.Value}
		if f.Name == hdrRetryAfter {
			if v, err := strconv.ParseInt(f.Value, 10, 64); err == nil && v >= 0 && v < int64(algo.MaxHorizon/time.Second) {
				retry = time.Duration(v) * time.Second
			}
		}
	}
	if l.opts.OnDecision == nil && rep.Allow {
		next.ServeHTTP(w, r)
		return
	}
	res := algo.Result{Allowed: rep.Allow}
	if !rep.Allow {
		res.RetryAfter = retry
	}
	d := &sluice.Decision{
		Allowed: rep.Allow,
		Matched: true,
		Summary: res,
		Levels:  []sluice.Level{{Pattern: sl.s.name, Key: k, Result: res}},
	}
	if l.opts.OnDecision != nil {
		l.opts.OnDecision(r, d)
	}
	if !rep.Allow {
		l.opts.OnLimited(w, r, d)
		return
	}
	next.ServeHTTP(w, r)
}
