// Package redis is Sluice's Redis store: every decision is one atomic Lua
// script, run with EVALSHA (and loaded again on NOSCRIPT). The scripts
// live in scripts/*.lua, embedded in the binary; keys reach them only as
// KEYS. Time comes from Redis TIME unless the request carries its own, so
// clients with skewed clocks still agree.
//
// The scripts return the raw outcome of the algorithm's step (allowed, now
// and the new state), and the store derives the Result with the same Go
// functions the memory store uses, so both stores give the same answers.
// The windowed algorithms (sliding_log.lua, window_counter.lua) also
// report what only the script can see: the admitted count, the wait, the
// reset and the count in each window, from which algo.Outcome derives the
// Result.
package redis

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

//go:embed scripts/*.lua
var scripts embed.FS

// kinds are the algorithms' files, by the kind letter a level names in
// decide.lua's ARGV. A lazy kind defines <kind>_kind(), which builds its
// functions on first use; the others define <kind>_check, <kind>_commit
// and <kind>_undo.
var kinds = []struct {
	letter byte
	file   string
	lazy   bool
}{
	{'t', "tat.lua", false},
	{'f', "fixed_window.lua", false},
	{'g', "gate.lua", false},
	{'s', "sliding_log.lua", true},
	{'w', "window_counter.lua", true},
}

// kindBit is the bit of a kind letter in a script's kind set.
func kindBit(letter string) uint8 {
	for i, k := range kinds {
		if len(letter) == 1 && letter[0] == k.letter {
			return 1 << i
		}
	}
	return 0
}

// A driver is decide.lua or refund.lua, with the scripts composed for each
// set of kinds, built on first use.
type driver struct {
	file    string
	tables  []string // the per-kind dispatch tables it reads: "check", "commit", "undo"
	scripts [1 << 5]atomic.Pointer[rueidis.Lua]
}

var (
	decideDriver = &driver{file: "decide.lua", tables: []string{"check", "commit"}}
	refundDriver = &driver{file: "refund.lua", tables: []string{"undo"}}
)

// script returns the driver's script for a set of kinds.
func (d *driver) script(set uint8) *rueidis.Lua {
	if l := d.scripts[set].Load(); l != nil {
		return l
	}
	l := rueidis.NewLuaScript(d.compose(set))
	d.scripts[set].CompareAndSwap(nil, l)
	return d.scripts[set].Load()
}

// compose builds the script text: expire.lua, the files of the kinds in
// set, the dispatch tables, then the driver.
func (d *driver) compose(set uint8) string {
	var b strings.Builder
	read := func(name string) {
		src, err := scripts.ReadFile("scripts/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	read("expire.lua")
	for i, k := range kinds {
		if set&(1<<i) != 0 {
			read(k.file)
		}
	}
	for _, table := range append(d.tables, "build") {
		b.WriteString("local " + table + " = {")
		for i, k := range kinds {
			if set&(1<<i) != 0 && k.lazy == (table == "build") {
				fn := string(k.letter) + "_" + table
				if table == "build" {
					fn = string(k.letter) + "_kind"
				}
				b.WriteString(string(k.letter) + " = " + fn + ", ")
			}
		}
		b.WriteString("}\n")
	}
	read(d.file)
	return b.String()
}

// DefaultPrefix is the prefix of every key the store writes, unless
// Options.Prefix says otherwise.
const DefaultPrefix = "sluice:"

// DefaultMaxFlushDelay is Open's Options.MaxFlushDelay when zero.
const DefaultMaxFlushDelay = 20 * time.Microsecond

// DefaultTimeout bounds a decision whose context has no deadline.
const DefaultTimeout = time.Second

// ErrUnsupported is returned for a limit type the store has no script for.
var ErrUnsupported = errors.New("redis store: unsupported limit")

// Options configure a Store.
type Options struct {
	// Prefix is put before every key (DefaultPrefix when empty). It may not
	// contain '{' or '}', which would pick a Redis Cluster hash tag.
	Prefix string
	// MaxFlushDelay is how long the client may wait to gather concurrent
	// commands into one write (rueidis' MaxFlushDelay): under load it cuts
	// the client's and Redis's CPU per decision, at the cost of up to that
	// much latency. Open uses DefaultMaxFlushDelay when zero; a negative
	// value disables it. New leaves the client as it is.
	MaxFlushDelay time.Duration
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
	switch {
	case opts.MaxFlushDelay == 0:
		co.MaxFlushDelay = DefaultMaxFlushDelay
	case opts.MaxFlushDelay > 0:
		co.MaxFlushDelay = opts.MaxFlushDelay
	}
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
	var res [1]algo.Result
	_, err := s.DecideAll(ctx, []sluice.Request{req}, res[:])
	return res[0], err
}

// DecideAll implements sluice.Store: one script call checks every request
// and records the costs only if every request that is not Shadow passes.
// On Redis Cluster, requests whose keys lie in several slots take one
// script call per slot; see decideAcrossSlots.
func (s *Store) DecideAll(ctx context.Context, reqs []sluice.Request, results []algo.Result) (bool, error) {
	if err := sluice.ValidateAll(reqs, results); err != nil {
		return false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if len(reqs) > 1 {
		reqs = inBatch(reqs) // a nary log is all or nothing in a batch
	}
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = KeyName(s.prefix, r.Key, r.Tag)
	}
	if s.client.Mode() == rueidis.ClientModeCluster {
		if groups := slotGroups(keys); len(groups) > 1 {
			return s.decideAcrossSlots(ctx, reqs, keys, groups, results)
		}
	}
	c, err := s.check(ctx, reqs, keys)
	if err != nil {
		return false, err
	}
	for i, r := range reqs {
		results[i] = levelResult(r, c.now, c.ok[i], c.val[i], c.extra(i), !c.ok[i] || c.pass)
	}
	return c.pass, nil
}

// inBatch returns reqs with every limit as algo.InBatch gives it, copying
// reqs only when one changes.
func inBatch(reqs []sluice.Request) []sluice.Request {
	var out []sluice.Request
	for i, r := range reqs {
		if l, ok := r.Limit.(algo.SlidingLog); ok && l.Mode == algo.Nary {
			if out == nil {
				out = append([]sluice.Request(nil), reqs...)
			}
			out[i].Limit = algo.InBatch(l)
		}
	}
	if out == nil {
		return reqs
	}
	return out
}

// checked is decide.lua's reply for a group of requests.
type checked struct {
	now  int64
	pass bool
	ok   []bool
	val  []int64
	args []string // the script's ARGV, kept for a refund
	set  uint8    // the kinds the levels use: which composed script ran
	v    []int64  // the reply
	at   []int    // at[i]: index in v of level i's code; at[len] = len(v)
}

// extra returns level i's values after ok and value (sliding_log.lua and
// window_counter.lua report more).
func (c checked) extra(i int) []int64 { return c.v[c.at[i]+2 : c.at[i+1]] }

// check runs decide.lua on requests whose keys share one slot (or on any
// keys of a single server).
func (s *Store) check(ctx context.Context, reqs []sluice.Request, keys []string) (checked, error) {
	args := make([]string, 1, 1+6*len(reqs))
	if t := reqs[0].Time; !t.IsZero() {
		args[0] = strconv.FormatInt(t.UnixMicro(), 10)
	}
	var set uint8
	for _, r := range reqs {
		start := len(args)
		var err error
		if args, err = appendLevel(args, r); err != nil {
			return checked{}, err
		}
		set |= kindBit(args[start])
	}
	v, err := decideDriver.script(set).Exec(ctx, s.client, keys, args).AsIntSlice()
	if err != nil {
		return checked{}, fmt.Errorf("redis store: %w", err)
	}
	c := checked{now: v[0], pass: v[1] == 1, ok: make([]bool, len(reqs)), val: make([]int64, len(reqs)), args: args, set: set, v: v, at: make([]int, len(reqs)+1)}
	p := 2
	for i, r := range reqs {
		if p+1 >= len(v) {
			return checked{}, fmt.Errorf("redis store: script replied %d values for %d keys", len(v), len(reqs))
		}
		code := v[p]
		if code < 0 || code>>1 != extraValues(r.Limit) {
			return checked{}, fmt.Errorf("redis store: script replied code %d for key %d (%T)", code, i, r.Limit)
		}
		c.at[i] = p
		c.ok[i], c.val[i] = code&1 == 1, v[p+1]
		p += 2 + int(code>>1)
	}
	if p != len(v) {
		return checked{}, fmt.Errorf("redis store: script replied %d values for %d keys", len(v), len(reqs))
	}
	c.at[len(reqs)] = p
	return c, nil
}

// appendLevel appends a level's arguments for decide.lua: kind, flag,
// argument count, arguments.
func appendLevel(args []string, r sluice.Request) ([]string, error) {
	flag := "-"
	if r.Shadow {
		flag = "s"
	}
	switch l := r.Limit.(type) {
	case algo.GCRA, algo.TokenBucket:
		p := tatOf(l)
		n := min(r.Cost, p.Limit+1) // beyond Limit+1 the answer is the same, and n·T cannot overflow
		return append(args, "t", flag, "2", itoa(n*p.Interval), itoa(p.Tolerance)), nil
	case algo.FixedWindow:
		return append(args, "f", flag, "3", itoa(algo.Micros(l.Window)), itoa(l.Limit), itoa(r.Cost)), nil
	case algo.Gate:
		return append(args, "g", flag, "2", itoa(algo.Micros(l.Interval)), itoa(r.Cost)), nil
	case algo.SlidingLog:
		// Beyond the largest limit + 1 the answer is the same, and the
		// cost stays exact in Lua.
		n := min(r.Cost, l.MaxLimit()+1)
		mode := "b"
		switch l.Mode {
		case algo.Nary:
			mode = "n"
		case algo.Uniform:
			mode = "u"
		}
		args = append(args, "s", flag, itoa(int64(5+3*len(l.Limits))), itoa(n), mode,
			itoa(algo.Micros(l.MinGap)), itoa(l.Buckets), itoa(int64(len(l.Limits))))
		for i, w := range l.Limits {
			var width int64
			if l.Buckets > 0 {
				width = l.BucketWidth(i)
			}
			args = append(args, itoa(w.Limit), itoa(algo.Micros(w.Window)), itoa(width))
		}
		return args, nil
	case algo.WindowCounter:
		var lmax int64
		for _, w := range l.Limits {
			lmax = max(lmax, w.Limit)
		}
		args = append(args, "w", flag, itoa(int64(3+2*len(l.Limits))), itoa(min(r.Cost, lmax+1)),
			itoa(l.SliceMicros()), itoa(int64(len(l.Limits))))
		for i, w := range l.Limits {
			args = append(args, itoa(w.Limit), itoa(l.Slices(i)))
		}
		return args, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrUnsupported, r.Limit)
}

// extraValues is how many values the script reports for a limit beyond ok
// and value: admitted, wait, reset, denied by and one count per window for
// the windowed algorithms.
func extraValues(l algo.Limit) int64 {
	switch l := l.(type) {
	case algo.SlidingLog:
		return int64(4 + len(l.Limits))
	case algo.WindowCounter:
		return int64(4 + len(l.Limits))
	}
	return 0
}

// windowResult derives a windowed level's Result from the script's extra
// values: admitted, wait, reset, denied by, the counts. For a level that
// was not ok they describe the state after the commit; for an ok level,
// the state without the cost, and a committed ok level adds the cost to
// the counts and takes recordedReset() as its reset.
func windowResult(ws []algo.Window, now, cost int64, ok, committed, floor bool, extra []int64, recordedReset func() int64) algo.Result {
	o := algo.Outcome{Admitted: extra[0], Wait: extra[1], Reset: extra[2], DeniedBy: int(extra[3])}
	var add int64
	switch {
	case ok && committed && cost > 0:
		add, o.Reset = cost, recordedReset()
	case ok:
		o.Admitted, cost = 0, 0 // not recorded (or a peek): the state without the cost
	}
	o.Remaining = ws[0].Limit - extra[4] - add
	var limit int64 = ws[0].Limit
	for i, w := range ws[1:] {
		o.Remaining = min(o.Remaining, w.Limit-extra[5+i]-add)
		limit = min(limit, w.Limit)
	}
	return o.Result(now, cost, limit, floor)
}

// levelResult derives a level's Result from the script's check value (and
// extra values). A level that was ok but not committed (another level
// denied) reports what a peek would: its state without this cost.
func levelResult(r sluice.Request, now int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
	switch l := r.Limit.(type) {
	case algo.GCRA, algo.TokenBucket:
		p := tatOf(l)
		if !committed {
			return p.Result(true, now, val-r.Cost*p.Interval, 0)
		}
		return p.Result(ok, now, val, r.Cost)
	case algo.FixedWindow:
		if !committed {
			return l.Result(true, now, val-r.Cost, 0)
		}
		return l.Result(ok, now, val, r.Cost)
	case algo.Gate:
		if !committed {
			if r.Cost == 1 {
				val = 0 // the gate was open
			}
			return l.Result(true, now, val, 0)
		}
		return l.Result(ok, now, val, r.Cost)
	case algo.SlidingLog:
		return windowResult(l.Limits, now, r.Cost, ok, committed, l.Mode != algo.Uniform, extra, func() int64 {
			if l.Buckets == 0 { // the clock is the newest entry: reset - longest window
				return l.RecordedReset(now, extra[2]-algo.Micros(l.MaxWindow()), extra[2] > 0)
			}
			return l.RecordedReset(now, val, val >= 0) // value: the clock, or the record's time
		})
	case algo.WindowCounter:
		return windowResult(l.Limits, now, r.Cost, ok, committed, true, extra, func() int64 {
			return l.RecordedReset(now, val, val >= 0) // value: the latest slice, or the record's
		})
	}
	panic("unreachable: appendLevel accepted the limit")
}

func tatOf(l algo.Limit) algo.TAT {
	p, _ := l.(interface{ TAT() (algo.TAT, error) }).TAT()
	return p
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

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
