package sim

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// Strategy is a named policy and the path its requests take.
type Strategy struct {
	Name   string
	Policy *policy.Policy
	// Path is the path a caller's request takes, a segment "{caller}"
	// naming the caller; nil is ["caller", "{caller}"]. CompileStrategy
	// sets it for a policy that does not limit caller/*: its first node
	// with enforced limits and a "*", that "*" the caller.
	Path []string
}

// pathFor returns the path of policy p that a scenario's callers take: the
// first node with enforced limits whose pattern has a "*" segment, that
// segment the caller and any other "*" segment "sim" (user/*/trade is
// user/{caller}/trade); nil when p has none, or limits caller/*
// already.
func pathFor(p *policy.Policy) []string {
	if !p.Match([]string{"caller", "c"}).Unmatched {
		return nil
	}
	for _, n := range p.Nodes() {
		if n.Shadow || n.Unlimited || len(n.Specs) == 0 || !strings.Contains(n.Pattern, "*") {
			continue
		}
		path := strings.Split(n.Pattern, "/")
		caller := false
		for i, seg := range path {
			switch {
			case strings.Contains(seg, "*") && !caller:
				path[i], caller = "{caller}", true
			case strings.Contains(seg, "*"):
				path[i] = strings.ReplaceAll(seg, "*", "sim")
			}
		}
		return path
	}
	return nil
}

// scopeOf says whether a strategy's enforced limits are each caller's own
// ("each"), shared by every caller ("shared"), or some of both ("both").
func scopeOf(s *Strategy) string {
	each, shared := false, false
	for _, h := range s.Policy.Match(s.pathOf("c", nil)).Hits {
		if !h.Shadow {
			each, shared = each || !h.Shared, shared || h.Shared
		}
	}
	switch {
	case each && shared:
		return "both"
	case shared:
		return "shared"
	}
	return "each"
}

// pathOf fills a strategy's path template with a caller, into buf.
func (s *Strategy) pathOf(caller string, buf []string) []string {
	if s.Path == nil {
		return append(buf[:0], "caller", caller)
	}
	buf = buf[:0]
	for _, seg := range s.Path {
		if seg == "{caller}" {
			seg = caller
		}
		buf = append(buf, seg)
	}
	return buf
}

// CompileStrategy parses a strategy's policy text.
func CompileStrategy(s StrategySource) (Strategy, error) {
	p, err := policy.Parse(s.Name, []byte(s.Policy))
	if err != nil {
		return Strategy{}, err
	}
	return Strategy{Name: s.Name, Policy: p, Path: pathFor(p)}, nil
}

// LimitStrategy is a strategy of one limit: each caller's own (each) or
// shared by all (shared).
func LimitStrategy(name string, l algo.Limit, each bool) (Strategy, error) {
	spec := l.Spec()
	b := spec.AppendJSON(nil) // JSON is YAML
	text := "schema:\n  caller: {limits: [" + string(b) + "]}\n"
	if each {
		text = "schema:\n  caller:\n    children:\n      \"*\": {limits: [" + string(b) + "]}\n"
	}
	return CompileStrategy(StrategySource{Name: name, Policy: text})
}

// matchesTraffic refuses a strategy whose policy limits none of the
// events' paths: it would admit everything, which says nothing (a policy
// written for other paths than ["caller", c], say).
func matchesTraffic(s Strategy, events []Event) error {
	tried := map[string]bool{}
	for _, ev := range events {
		if tried[ev.Caller] {
			continue
		}
		tried[ev.Caller] = true
		if !s.Policy.Match(s.pathOf(ev.Caller, nil)).Unmatched {
			return nil
		}
	}
	if len(events) == 0 {
		return nil
	}
	shown := "caller/{caller}"
	if s.Path != nil {
		shown = strings.Join(s.Path, "/")
	}
	return fmt.Errorf("sim: strategy %q limits none of the scenario's requests: a request by caller c is the path %s, which for none of its %d callers matches a limit of its policy (so it would admit everything); give the path with --path, such as api/{caller}", s.Name, shown, len(tried))
}

// t0 is the virtual time of a scenario's start.
var t0 = time.Unix(1_800_000_000, 0)

// Options configure Run.
type Options struct {
	// Slice is the length of the series' slices (1s when zero).
	Slice time.Duration
	// Store, when set, opens the store of each strategy, which is then
	// decided in real time: each event when its time comes, at the
	// store's clock. Nil decides in virtual time, each strategy on a
	// memory store of its own.
	Store func(strategy string) (store.Store, error)
	// Progress, when set, receives a progress bar for runs that take more
	// than a second.
	Progress io.Writer
}

// Result is what a run recorded.
type Result struct {
	Scenario   string
	Params     Params
	Seed       uint64
	Slice      time.Duration
	Slices     int
	Strategies []StrategyResult
	Events     int
}

// StrategyResult is one strategy's record.
type StrategyResult struct {
	Name string
	// Offered and Admitted are the requests (costs) per slice.
	Offered, Admitted []int64
	// InFlight is, per slice, the most admitted requests (costs) running
	// at once: each runs Params.RunFor from its time.
	InFlight   []int64
	Summary    Summary
	scope      string // each (every limit the caller's own), shared, or both
	admittedAt []time.Duration
	perCaller  map[string][2]int64 // offered, admitted
	// running are the admitted requests in time order; ending[ended:] are
	// those holding slots under a permit, released when they end.
	running []span
	ending  []span
	ended   int
}

// span is an admitted request: it runs from at for the run's RunFor, with
// cost, under a permit when it holds slots of concurrency limits.
type span struct {
	at     time.Duration
	caller string
	cost   int64
	permit int64
}

// Summary sums up a strategy's run.
type Summary struct {
	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
	// MaxInWindow is, for each window length of the strategy's limits,
	// the most admitted in any window of that length.
	MaxInWindow map[string]int64 `json:"max_admitted_in_window"`
	// Fairness is Jain's index over the admitted counts of the callers
	// that asked: 1 when all got the same, 1/n when one got everything.
	Fairness float64 `json:"fairness_jain"`
	// GreediestShare is the share of all admissions taken by the caller
	// admitted most.
	GreediestShare  float64 `json:"greediest_caller_share"`
	GreediestCaller string  `json:"greediest_caller"`
	// MaxInFlight is the most admitted requests (costs) running at once.
	MaxInFlight int64 `json:"max_in_flight"`
	// Limits are the strategy's limits: each node's pattern and its
	// limits' specs, as JSON.
	Limits []string `json:"limits"`
	// Classes are who got through: the callers split by how much they
	// asked, slow and fast (the same split for every strategy of a run).
	Classes []CallerClass `json:"caller_classes"`
}

// CallerClass is the callers of a run that asked alike, and what a
// strategy admitted of theirs.
type CallerClass struct {
	// Name says who they are: "slow callers" and "fast callers", split at
	// the widest gap in requests offered (at least 2x), or "every caller"
	// when none asked twice as much as another.
	Name     string `json:"name"`
	Callers  int    `json:"callers"`
	Offered  int64  `json:"offered"`
	Admitted int64  `json:"admitted"`
}

// Run fires the scenario's events at every strategy and records what
// each admitted. It refuses Params beyond their bounds (a day, 100,000
// requests a second, 1,000,000 callers), more than 5,000,000 requests and
// more than 100,000 slices.
func Run(ctx context.Context, sc Scenario, seed uint64, p Params, strategies []Strategy, opts Options) (*Result, error) {
	if len(strategies) == 0 {
		return nil, fmt.Errorf("sim: no strategy to run")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	p = p.or(sc.Defaults)
	switch {
	case opts.Slice < 0:
		return nil, fmt.Errorf("sim: slice %v is negative", opts.Slice)
	case opts.Slice == 0:
		opts.Slice = time.Second
	}
	events := sc.Events(seed, p)
	if len(events) > maxEvents {
		return nil, fmt.Errorf("sim: scenario %s fires more than %d requests: shorten the duration, or lower the rate or the callers", sc.Name, maxEvents)
	}
	end := p.Duration
	if len(events) > 0 {
		end = max(end, events[len(events)-1].At+1)
	}
	if (end+opts.Slice-1)/opts.Slice > maxSlices {
		return nil, fmt.Errorf("sim: %v in slices of %v is more than %d slices: make them longer", end, opts.Slice, maxSlices)
	}
	res := &Result{Scenario: sc.Name, Params: p, Seed: seed, Slice: opts.Slice, Events: len(events)}
	res.Slices = int((end + opts.Slice - 1) / opts.Slice)
	for _, s := range strategies {
		if err := matchesTraffic(s, events); err != nil {
			return nil, err
		}
	}
	stores := make([]store.Store, len(strategies))
	checkers := make([]*policy.Checker, len(strategies))
	for i, s := range strategies {
		var st store.Store = memory.New(memory.WithSweepEvery(0))
		if opts.Store != nil {
			var err error
			if st, err = opts.Store(s.Name); err != nil {
				return nil, err
			}
		}
		defer st.Close()
		stores[i] = st
		checkers[i] = &policy.Checker{Policy: policy.NewCurrent(s.Policy), Store: st}
		res.Strategies = append(res.Strategies, StrategyResult{
			Name: s.Name, Offered: make([]int64, res.Slices), Admitted: make([]int64, res.Slices),
			perCaller: map[string][2]int64{}, scope: scopeOf(&s),
		})
	}
	bar := newProgress(opts.Progress, len(events))
	start := time.Now()
	var d policy.Decision
	var path []string
	for n, ev := range events {
		if n&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			bar.update(n)
		}
		at := time.Time{}
		if opts.Store == nil {
			at = t0.Add(ev.At)
		} else if wait := time.Until(start.Add(ev.At)); wait > 0 {
			bar.update(n)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		cost := ev.Cost
		if cost == 0 {
			cost = 1
		}
		slice := int(ev.At / opts.Slice)
		for i, c := range checkers {
			r := &res.Strategies[i]
			// The requests that have ended by now give their slots back.
			for ; r.ended < len(r.ending) && r.ending[r.ended].at+p.RunFor <= ev.At; r.ended++ {
				e := r.ending[r.ended]
				end := time.Time{}
				if opts.Store == nil {
					end = t0.Add(e.at + p.RunFor)
				}
				path = strategies[i].pathOf(e.caller, path)
				if err := c.Decide(ctx, oneQuery(end, path, e.cost, policy.Release, e.permit), &d); err != nil {
					return nil, fmt.Errorf("sim: %s: %w", strategies[i].Name, err)
				}
			}
			path = strategies[i].pathOf(ev.Caller, path)
			if err := c.Decide(ctx, oneQuery(at, path, cost, policy.Acquire, int64(n+1)), &d); err != nil {
				return nil, fmt.Errorf("sim: %s: %w", strategies[i].Name, err)
			}
			r.Offered[slice] += cost
			pc := r.perCaller[ev.Caller]
			pc[0] += cost
			if d.Allowed {
				r.Admitted[slice] += cost
				pc[1] += cost
				sp := span{at: ev.At, caller: ev.Caller, cost: cost, permit: d.Permit}
				r.running = append(r.running, sp)
				if d.Permit != 0 {
					r.ending = append(r.ending, sp)
				}
				for range cost {
					r.admittedAt = append(r.admittedAt, ev.At)
				}
			}
			r.perCaller[ev.Caller] = pc
		}
	}
	bar.done(len(events))
	classes := callerClasses(res.Strategies[0].perCaller)
	for i, s := range strategies {
		r := &res.Strategies[i]
		r.InFlight, r.Summary.MaxInFlight = inFlight(r.running, p.RunFor, opts.Slice, res.Slices)
		r.summarize(s.Policy, classes)
		r.running, r.ending = nil, nil
	}
	return res, nil
}

// inFlight returns, per slice, the most of the spans' costs running at
// once (each from its time for runFor, half open), and the most overall.
func inFlight(spans []span, runFor, slice time.Duration, slices int) ([]int64, int64) {
	type edge struct {
		at time.Duration
		d  int64
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.at, s.cost}, edge{s.at + runFor, -s.cost})
	}
	// In time order, an end before a start at the same time.
	sort.SliceStable(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].d < edges[j].d
	})
	out := make([]int64, slices)
	var level, most int64
	j := 0
	for i := range out {
		// The level at the slice's start counts what ends then as ended.
		for start := slice * time.Duration(i); j < len(edges) && edges[j].at <= start; j++ {
			level += edges[j].d
		}
		m := level
		for end := slice * time.Duration(i+1); j < len(edges) && edges[j].at < end; j++ {
			level += edges[j].d
			m = max(m, level)
		}
		out[i] = m
		most = max(most, m)
	}
	return out, most
}

// callerClasses splits the callers by requests offered (the same for
// every strategy): at the widest gap between what callers asked, as the
// ratio of one caller's count to the next, when some asked at least twice
// as much as others ("slow callers" and "fast callers"), else one class.
// It maps caller to class.
func callerClasses(perCaller map[string][2]int64) map[string]string {
	offered := make([]int64, 0, len(perCaller))
	for _, pc := range perCaller {
		offered = append(offered, pc[0])
	}
	sort.Slice(offered, func(i, j int) bool { return offered[i] < offered[j] })
	var cut int64 = -1 // callers who asked more than cut are fast
	best := 2.0
	for i := 1; i < len(offered); i++ {
		if lo := max(offered[i-1], 1); float64(offered[i])/float64(lo) >= best {
			best, cut = float64(offered[i])/float64(lo), offered[i-1]
		}
	}
	out := make(map[string]string, len(perCaller))
	for c, pc := range perCaller {
		switch {
		case cut < 0:
			out[c] = "every caller"
		case pc[0] <= cut:
			out[c] = "slow callers"
		default:
			out[c] = "fast callers"
		}
	}
	return out
}

func (r *StrategyResult) summarize(p *policy.Policy, classes map[string]string) {
	s := Summary{MaxInWindow: map[string]int64{}, MaxInFlight: r.Summary.MaxInFlight}
	for _, n := range p.Nodes() {
		for _, sp := range n.Specs {
			s.Limits = append(s.Limits, n.Pattern+": "+string(sp.AppendJSON(nil)))
		}
	}
	byClass := map[string]*CallerClass{}
	for c, pc := range r.perCaller {
		name := classes[c]
		cl := byClass[name]
		if cl == nil {
			cl = &CallerClass{Name: name}
			byClass[name] = cl
		}
		cl.Callers++
		cl.Offered += pc[0]
		cl.Admitted += pc[1]
	}
	for _, name := range []string{"every caller", "slow callers", "fast callers"} {
		if cl := byClass[name]; cl != nil {
			s.Classes = append(s.Classes, *cl)
		}
	}
	for i := range r.Offered {
		s.Offered += r.Offered[i]
		s.Admitted += r.Admitted[i]
	}
	for _, w := range windows(p) {
		s.MaxInWindow[w.String()] = maxInWindow(r.admittedAt, w)
	}
	var sum, sq float64
	var n int
	callers := make([]string, 0, len(r.perCaller))
	for c := range r.perCaller {
		callers = append(callers, c)
	}
	sort.Strings(callers)
	var most int64 = -1
	for _, c := range callers {
		pc := r.perCaller[c]
		if pc[0] == 0 {
			continue
		}
		x := float64(pc[1])
		sum, sq, n = sum+x, sq+x*x, n+1
		if pc[1] > most {
			most, s.GreediestCaller = pc[1], c
		}
	}
	if sq > 0 {
		s.Fairness = sum * sum / (float64(n) * sq)
	}
	if s.Admitted > 0 {
		s.GreediestShare = float64(most) / float64(s.Admitted)
	}
	r.Summary = s
}

// windows are the window lengths of a policy's limits: a period, per,
// window or interval, and each window of a windowed limit.
func windows(p *policy.Policy) []time.Duration {
	seen := map[time.Duration]bool{}
	var out []time.Duration
	add := func(d time.Duration) {
		if w := time.Duration(d); w > 0 && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	for _, n := range p.Nodes() {
		for _, s := range n.Specs {
			add(s.Period)
			add(s.Per)
			add(s.Window)
			add(s.Interval)
			add(s.HoldFor)
			for _, w := range s.Limits {
				add(w.Window)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// maxInWindow is the most times in any half-open window [t, t+w) of the
// sorted times.
func maxInWindow(at []time.Duration, w time.Duration) int64 {
	var best int64
	j := 0
	for i := range at {
		for at[i]-at[j] >= w {
			j++
		}
		best = max(best, int64(i-j+1))
	}
	return best
}

// progress draws a bar on a terminal for runs longer than a second.
type progress struct {
	w     io.Writer
	total int
	start time.Time
	shown bool
	last  time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, start: time.Now()}
}

func (p *progress) update(n int) {
	if p.w == nil || p.total == 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.start) < time.Second || now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.shown = now, true
	const width = 30
	done := width * n / p.total
	fmt.Fprintf(p.w, "\rsim [%s%s] %3d%% %d/%d events", strings.Repeat("#", done), strings.Repeat(".", width-done), 100*n/p.total, n, p.total)
}

func (p *progress) done(n int) {
	if p.shown {
		const width = 30
		fmt.Fprintf(p.w, "\rsim [%s] 100%% %d/%d events in %v\n", strings.Repeat("#", width), n, p.total, time.Since(p.start).Round(time.Millisecond))
	}
}

// oneQuery is a query of one path at time t (the zero Time: the store's
// clock).
func oneQuery(t time.Time, path []string, cost int64, op policy.Op, permit int64) *policy.Query {
	return &policy.Query{Time: t, Op: op, Permit: permit, Paths: []policy.PathQuery{{Path: path, Cost: cost}}}
}
