package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// scriptKeyPrefix is the default ScriptConfig.Prefix.
const scriptKeyPrefix = "sluice:lua:"

// CostArg is the script argument that stands for the request's cost.
const CostArg = "$cost"

// ScriptConfig configures a script limiter.
type ScriptConfig struct {
	// Args are the script's ARGV; an argument equal to CostArg is the
	// request's cost.
	Args []string
	// Prefix is put before every key ("sluice:lua:" when empty). It may
	// not contain '{' or '}', which would pick a Redis Cluster hash tag.
	Prefix string
	// Headers are the headers whose values the script's reply gives, in
	// order (see reply.go's contract).
	Headers []string
}

type scriptLimit struct {
	s      store.Script
	names  []string // cfg.Headers, canonical
	args   []string
	cost   []int // indexes of CostArg in args
	prefix string
}

// NewScript returns a Middleware that decides requests with a script a
// store runs (the Redis store's Lua scripts: redis.Store.LoadScript)
// instead of a PathChecker. Options work as for New, except that the
// headers are the script's (Options.Headers is ignored), and that
// OnLimited and OnDecision get a Decision with one Level, named after the
// script's file, whose RetryAfter is the script's Retry-After header when
// it sets one in delta-seconds (0, unknown, when not). It panics if s is
// nil, cfg.Prefix holds a brace, or a header name is not an HTTP token a
// script may set.
func NewScript(s store.Script, cfg ScriptConfig, opts Options) *Middleware {
	if s == nil {
		panic("httplimit: nil Script")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = scriptKeyPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		panic("httplimit: script key prefix " + strconv.Quote(cfg.Prefix) + " may not contain '{' or '}'")
	}
	names, err := headerNames(cfg.Headers)
	if err != nil {
		panic("httplimit: script " + s.Name() + ": " + err.Error())
	}
	sl := &scriptLimit{s: s, names: names, args: append([]string(nil), cfg.Args...), prefix: cfg.Prefix}
	for i, a := range sl.args {
		if a == CostArg {
			sl.cost = append(sl.cost, i)
		}
	}
	l := &Middleware{script: sl}
	l.setOptions(opts)
	return l
}

func (l *Middleware) serveScript(w http.ResponseWriter, r *http.Request, next http.Handler) {
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
	if len(path) == 0 || len(k) > len(sl.prefix)+store.MaxKeyLen {
		l.opts.OnBadRequest(w, r, fmt.Errorf("%w: script key of %d bytes exceeds %d", store.ErrBadRequest, len(k)-len(sl.prefix), store.MaxKeyLen))
		return
	}
	args := sl.args
	if len(sl.cost) > 0 {
		cost := int64(1)
		if l.opts.Cost != nil {
			cost = l.opts.Cost(r)
		}
		if cost < 0 {
			l.opts.OnBadRequest(w, r, fmt.Errorf("%w: negative cost %d", store.ErrBadRequest, cost))
			return
		}
		args = append([]string(nil), args...)
		for _, i := range sl.cost {
			args[i] = strconv.FormatInt(cost, 10)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.timeout)
	v, err := sl.s.Run(ctx, []string{k}, args)
	cancel()
	var rep scriptReply
	if err == nil {
		rep, err = parseReply(sl.s.Name(), sl.names, v)
	}
	if err != nil {
		l.failed(w, r, next, err)
		return
	}
	h := w.Header()
	var retry time.Duration
	for _, f := range rep.headers {
		h[f.name] = []string{f.value}
		if f.name == "Retry-After" {
			if v, err := strconv.ParseInt(f.value, 10, 64); err == nil && v >= 0 && v < int64(algo.MaxHorizon/time.Second) {
				retry = time.Duration(v) * time.Second
			}
		}
	}
	if l.opts.OnDecision == nil && rep.allow {
		next.ServeHTTP(w, r)
		return
	}
	res := algo.Result{Allowed: rep.allow}
	if !rep.allow {
		res.RetryAfter = retry
	}
	d := &policy.Decision{
		Allowed: rep.allow,
		Matched: true,
		Summary: res,
		Levels:  []policy.Level{{Pattern: sl.s.Name(), Key: k, Result: res}},
	}
	if l.opts.OnDecision != nil {
		l.opts.OnDecision(r, d)
	}
	if !rep.allow {
		l.opts.OnLimited(w, r, d)
		return
	}
	next.ServeHTTP(w, r)
}
