// Package redis is Sluice's Redis store: every decision is one atomic Lua
// script, run with EVALSHA (and loaded again on NOSCRIPT). The scripts
// live in scripts/*.lua, embedded in the binary; keys reach them only as
// KEYS. Time comes from Redis TIME unless the request carries its own, so
// clients with skewed clocks still agree.
//
// The scripts return the raw outcome of the algorithm's step (allowed, now
// and the new state), and the store derives the Result with the same Go
// functions the memory store uses, so both stores give the same answers.
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

var (
	//go:embed scripts/tat.lua
	tatLua string
	//go:embed scripts/fixed_window.lua
	fixedWindowLua string
	//go:embed scripts/gate.lua
	gateLua string
)

var (
	tatScript         = rueidis.NewLuaScript(tatLua)
	fixedWindowScript = rueidis.NewLuaScript(fixedWindowLua)
	gateScript        = rueidis.NewLuaScript(gateLua)
)

// DefaultPrefix is the prefix of every key the store writes, unless
// Options.Prefix says otherwise.
const DefaultPrefix = "sluice:"

// DefaultTimeout bounds a decision whose context has no deadline.
const DefaultTimeout = time.Second

// ErrUnsupported is returned for a limit type the store has no script for.
var ErrUnsupported = errors.New("redis store: unsupported limit")

// Options configure a Store.
type Options struct {
	// Prefix is put before every key (DefaultPrefix when empty). It may not
	// contain '{' or '}', which would pick a Redis Cluster hash tag.
	Prefix string
	// Timeout bounds a decision whose context has no deadline
	// (DefaultTimeout when zero).
	Timeout time.Duration
}

// Store is the Redis store.
type Store struct {
	client  rueidis.Client
	owned   bool
	prefix  string
	timeout time.Duration
}

var _ sluice.Store = (*Store)(nil)

// Open connects to Redis by URL and returns a store that owns the
// connection. The forms are:
//
//	redis://[user:password@]host:port[/db]     one server (rediss:// for TLS)
//	redis://host:port?addr=host2:port2&...      a Redis Cluster seed list
//	redis://host:26379?master_set=mymaster      Sentinel
//
// Cluster is detected from the server itself.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	co, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	co.DisableCache = true
	if d, ok := ctx.Deadline(); ok {
		co.Dialer.Timeout = time.Until(d)
	} else if co.Dialer.Timeout == 0 {
		co.Dialer.Timeout = 5 * time.Second
	}
	c, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("redis store: connect %s: %w", redact(url), err)
	}
	s, err := New(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns a store on an existing client, which the caller keeps
// owning: Close does not close it.
func New(c rueidis.Client, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis store: prefix %q may not contain '{' or '}'", opts.Prefix)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Store{client: c, prefix: opts.Prefix, timeout: opts.Timeout}, nil
}

// Client returns the store's Redis client.
func (s *Store) Client() rueidis.Client { return s.client }

// KeyName returns the Redis key that holds the state of a request's key
// and tag: prefix + key without a tag, prefix + "{" + tag + "}" + the rest
// of key with one. '%', '{' and '}' in key are percent-encoded first, so
// every (key, tag) has its own Redis key and only the tag picks a slot.
func KeyName(prefix, key, tag string) string {
	if strings.ContainsAny(key, "%{}") {
		key, tag = braceEscaper.Replace(key), braceEscaper.Replace(tag)
	}
	if tag == "" {
		return prefix + key
	}
	return prefix + "{" + tag + "}" + key[len(tag):]
}

var braceEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// Decide implements sluice.Store.
func (s *Store) Decide(ctx context.Context, req sluice.Request) (algo.Result, error) {
	if err := req.Validate(); err != nil {
		return algo.Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	now := ""
	if !req.Time.IsZero() {
		now = strconv.FormatInt(req.Time.UnixMicro(), 10)
	}
	keys := []string{KeyName(s.prefix, req.Key, req.Tag)}
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }

	switch l := req.Limit.(type) {
	case algo.GCRA, algo.TokenBucket:
		p, _ := l.(interface{ TAT() (algo.TAT, error) }).TAT()
		n := min(req.Cost, p.Limit+1) // beyond Limit+1 the answer is the same, and n·T cannot overflow
		v, err := s.run(ctx, tatScript, keys, now, itoa(n*p.Interval), itoa(p.Tolerance))
		if err != nil {
			return algo.Result{}, err
		}
		return p.Result(v[0] == 1, v[1], v[2], req.Cost), nil
	case algo.FixedWindow:
		v, err := s.run(ctx, fixedWindowScript, keys, now, itoa(algo.Micros(l.Window)), itoa(l.Limit), itoa(req.Cost))
		if err != nil {
			return algo.Result{}, err
		}
		return l.Result(v[0] == 1, v[1], v[2], req.Cost), nil
	case algo.Gate:
		v, err := s.run(ctx, gateScript, keys, now, itoa(algo.Micros(l.Interval)), itoa(req.Cost))
		if err != nil {
			return algo.Result{}, err
		}
		return l.Result(v[0] == 1, v[1], v[2], req.Cost), nil
	}
	return algo.Result{}, fmt.Errorf("%w: %T", ErrUnsupported, req.Limit)
}

// run executes a script and reads its reply of three integers.
func (s *Store) run(ctx context.Context, script *rueidis.Lua, keys []string, args ...string) ([3]int64, error) {
	var out [3]int64
	v, err := script.Exec(ctx, s.client, keys, args).AsIntSlice()
	if err != nil {
		return out, fmt.Errorf("redis store: %w", err)
	}
	if len(v) != 3 {
		return out, fmt.Errorf("redis store: script replied %d values, want 3", len(v))
	}
	copy(out[:], v)
	return out, nil
}

// Close closes the connection if the store opened it.
func (s *Store) Close() error {
	if s.owned {
		s.client.Close()
	}
	return nil
}

// redact hides a URL's password in error messages.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	return url[:scheme+3] + "…" + url[at:]
}
