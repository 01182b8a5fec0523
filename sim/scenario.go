// Package sim fires the same traffic at several rate-limiting strategies
// and records what each let through over time, so that a team can choose
// a strategy by looking: `sluice sim`.
//
// A Scenario generates requests (Events), repeatably for a seed. A
// Strategy is a policy (limits.yaml) that a request by caller c is checked
// against as the path ["caller", c]: its limits on node "caller" are
// shared by all callers, those on "caller/*" are each caller's own.
// Run decides every event with every strategy on Sluice's own stores, in
// virtual time on the memory store (each decision at its event's time, so
// a ten-minute scenario takes as long as its decisions do), or in real
// time on a shared store such as Redis. The Result holds, per strategy and
// time slice, what was offered and what was admitted, and a summary;
// package functions write it as CSV, JSON, charts and an HTML report.
package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// Event is one request of a scenario.
type Event struct {
	// At is the time since the scenario's start.
	At time.Duration
	// Caller names who asks.
	Caller string
	// Cost is what the request consumes (1 when 0).
	Cost int64
}

// Params shape a built-in scenario: its length, its overall rate and its
// number of callers. A zero field takes the scenario's default.
type Params struct {
	Duration time.Duration
	Rate     float64 // requests per second, over all callers
	Callers  int
	// RunFor is how long an admitted request runs (defaultRunFor when zero):
	// it is in flight from its time for RunFor, and holds the slots of a
	// strategy's concurrency limits as long, releasing them at its end.
	RunFor time.Duration
}

// defaultRunFor is how long an admitted request runs when Params.RunFor is
// zero.
const defaultRunFor = 200 * time.Millisecond

// Bounds of a run, which keep its memory and time small: Run refuses
// Params beyond them, and a scenario of more than maxEvents requests.
const (
	maxEvents   = 5_000_000
	maxDuration = 24 * time.Hour
	maxRate     = 100_000 // requests per second
	maxCallers  = 1_000_000
	maxSlices   = 100_000
)

// validate refuses Params out of their bounds (zero: the default).
func (p Params) validate() error {
	switch {
	case p.Duration < 0 || p.Duration > maxDuration:
		return fmt.Errorf("sim: duration %v: want up to %v (0: the scenario's)", p.Duration, maxDuration)
	case !(p.Rate >= 0 && p.Rate <= maxRate): // NaN too
		return fmt.Errorf("sim: rate %v: want up to %d a second (0: the scenario's)", p.Rate, maxRate)
	case p.Callers < 0 || p.Callers > maxCallers:
		return fmt.Errorf("sim: %d callers: want up to %d (0: the scenario's)", p.Callers, maxCallers)
	case p.RunFor < 0 || p.RunFor > maxDuration:
		return fmt.Errorf("sim: hold %v: want up to %v (0: the scenario's)", p.RunFor, maxDuration)
	}
	return nil
}

// add appends e to ev and reports whether a generator may go on: it stops
// one past maxEvents, which Run then refuses.
func add(ev *[]Event, e Event) bool {
	*ev = append(*ev, e)
	return len(*ev) <= maxEvents
}

// Scenario is a traffic pattern.
type Scenario struct {
	Name        string
	Description string
	// Defaults are the scenario's Params when the caller gives none.
	Defaults Params
	// Events returns the scenario's requests in time order; the same seed
	// and params give the same events.
	Events func(seed uint64, p Params) []Event
	// Strategies, when set, are the strategies the scenario is made to
	// compare (as policy text), used when the caller names none.
	Strategies []StrategySource
}

// StrategySource is a strategy before it is compiled: a name and a
// limits.yaml text.
type StrategySource struct {
	Name   string
	Policy string
}

func (p Params) or(d Params) Params {
	if p.Duration <= 0 {
		p.Duration = d.Duration
	}
	if p.Rate <= 0 {
		p.Rate = d.Rate
	}
	if p.Callers <= 0 {
		p.Callers = d.Callers
	}
	if p.RunFor <= 0 {
		p.RunFor = d.RunFor
	}
	if p.RunFor <= 0 {
		p.RunFor = defaultRunFor
	}
	return p
}

func callerName(i int) string { return "c" + strconv.Itoa(i) }

// poisson returns Poisson arrivals at p.Rate over p.Duration, each by the
// caller pick chooses.
func poisson(r *rand.Rand, p Params, pick func() int) []Event {
	var ev []Event
	for at := time.Duration(0); ; {
		at += time.Duration(r.ExpFloat64() / p.Rate * float64(time.Second))
		if at >= p.Duration {
			return ev
		}
		if !add(&ev, Event{At: at, Caller: callerName(pick())}) {
			return ev
		}
	}
}

// Scenarios are the built-in scenarios, by name.
var Scenarios = map[string]Scenario{
	"steady": {
		Name: "steady", Description: "requests evenly spaced at the rate, callers in turn",
		Defaults: Params{Duration: time.Minute, Rate: 20, Callers: 10},
		Events: func(_ uint64, p Params) []Event {
			var ev []Event
			step := time.Duration(float64(time.Second) / p.Rate)
			for i, at := 0, time.Duration(0); at < p.Duration; i, at = i+1, at+step {
				if !add(&ev, Event{At: at, Caller: callerName(i % p.Callers)}) {
					break
				}
			}
			return ev
		},
	},
	"poisson": {
		Name: "poisson", Description: "Poisson arrivals at the rate, callers at random",
		Defaults: Params{Duration: time.Minute, Rate: 20, Callers: 10},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 1))
			return poisson(r, p, func() int { return r.IntN(p.Callers) })
		},
	},
	"bursts": {
		Name: "bursts", Description: "every 10 s a burst of 10 s' worth of requests within 100 ms, callers at random",
		Defaults: Params{Duration: time.Minute, Rate: 20, Callers: 10},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 2))
			n := int(p.Rate * 10)
			var ev []Event
			for start := time.Duration(0); start < p.Duration && len(ev) <= maxEvents; start += 10 * time.Second {
				at := make([]time.Duration, n)
				for i := range at {
					at[i] = start + time.Duration(r.Int64N(int64(100*time.Millisecond)))
				}
				sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
				for _, a := range at {
					ev = append(ev, Event{At: a, Caller: callerName(r.IntN(p.Callers))})
				}
			}
			return ev
		},
	},
	"ramp": {
		Name: "ramp", Description: "the rate rises evenly from 0 to twice the rate, callers at random",
		Defaults: Params{Duration: time.Minute, Rate: 20, Callers: 10},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 3))
			var ev []Event
			// Rate at t: 2R·t/D; the n-th request comes when the
			// integral R·t²/D reaches n.
			for n := 1; ; n++ {
				at := time.Duration(math.Sqrt(float64(n)*float64(p.Duration)/p.Rate/float64(time.Second)) * float64(time.Second))
				if at >= p.Duration || !add(&ev, Event{At: at, Caller: callerName(r.IntN(p.Callers))}) {
					return ev
				}
			}
		},
	},
	"greedy": {
		Name: "greedy", Description: "3 greedy callers send half of all requests; the other callers share the rest",
		Defaults: Params{Duration: time.Minute, Rate: 40, Callers: 30},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 4))
			greedy := min(3, p.Callers)
			return poisson(r, p, func() int {
				c := r.IntN(greedy)
				if r.IntN(2) == 1 && p.Callers > greedy {
					c = greedy + r.IntN(p.Callers-greedy)
				}
				return c
			})
		},
	},
	"zoo": {
		Name: "zoo",
		Description: "200 callers, twice as many as 100 per 10 s allows: 180 ask about once a second, 20 fast ones " +
			"about 20 times a second (each at its own phase, with jitter); a per-caller gate (once per 10 s), " +
			"a shared sliding window (100 per 10 s) and both",
		Defaults: Params{Duration: 2 * time.Minute, Callers: 200},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 5))
			var ev []Event
			for c := 0; c < p.Callers && len(ev) <= maxEvents; c++ {
				period := time.Second
				if c%10 == 0 {
					period = 50 * time.Millisecond // the fast tenth
				}
				for at := time.Duration(r.Int64N(int64(period))); at < p.Duration; at += period {
					jitter := time.Duration(r.Int64N(int64(period/5))) - period/10
					if t := at + jitter; t >= 0 && t < p.Duration {
						ev = append(ev, Event{At: t, Caller: callerName(c)})
					}
				}
			}
			sort.SliceStable(ev, func(i, j int) bool { return ev[i].At < ev[j].At })
			return ev
		},
		Strategies: []StrategySource{
			{Name: "gate per caller", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: gate, interval: 10s}]}\n"},
			{Name: "shared window", Policy: "schema:\n  caller: {limits: [{algorithm: sliding_log, limits: [{limit: 100, window: 10s}]}]}\n"},
			{Name: "both", Policy: "schema:\n  caller:\n    limits: [{algorithm: sliding_log, limits: [{limit: 100, window: 10s}]}]\n    children:\n      \"*\": {limits: [{algorithm: gate, interval: 10s}]}\n"},
		},
	},
	"backend": {
		Name: "backend",
		Description: "10 callers send 40 requests a second in all, caller c0 half of them, to a backend that takes " +
			"2 s to answer each; a rate of 2 per second per caller (bursts of 6), 5 slots per caller (requests in flight), and both",
		Defaults: Params{Duration: time.Minute, Rate: 40, Callers: 10, RunFor: 2 * time.Second},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 9))
			return poisson(r, p, func() int {
				if r.IntN(2) == 0 {
					return 0 // caller 0 sends half of all
				}
				return r.IntN(p.Callers)
			})
		},
		Strategies: []StrategySource{
			{Name: "rate per caller", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: gcra, burst: 5, count: 2, period: 1s}]}\n"},
			{Name: "slots per caller", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: concurrency, limit: 5, hold_for: 30s}]}\n"},
			{Name: "both", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: gcra, burst: 5, count: 2, period: 1s}, {algorithm: concurrency, limit: 5, hold_for: 30s}]}\n"},
		},
	},
	"bruteforce": {
		Name: "bruteforce",
		Description: "a password guesser tries an account 5 times a second, while 20 users log in about once a minute each; " +
			"5 tries a minute per account, without and with a block (1m, twice as long each time in a row)",
		Defaults: Params{Duration: 10 * time.Minute, Callers: 21},
		Events: func(seed uint64, p Params) []Event {
			r := rand.New(rand.NewPCG(seed, 13))
			var ev []Event
			for at := time.Duration(0); at < p.Duration; at += 200 * time.Millisecond {
				ev = append(ev, Event{At: at, Caller: "attacker"})
			}
			for c := 1; c < p.Callers && len(ev) <= maxEvents; c++ {
				for at := time.Duration(r.Int64N(int64(time.Minute))); at < p.Duration; at += time.Duration(40+r.IntN(40)) * time.Second {
					ev = append(ev, Event{At: at, Caller: callerName(c)})
				}
			}
			sort.SliceStable(ev, func(i, j int) bool { return ev[i].At < ev[j].At })
			return ev
		},
		Strategies: []StrategySource{
			{Name: "5 a minute", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 5, window: 1m}]}\n"},
			{Name: "5 a minute, blocking", Policy: "schema:\n  caller:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 5, window: 1m, block: {for: 1m, growth: 2}}]}\n"},
		},
	},
}

// TraceScenario reads a recorded trace in sluice replay's JSON-lines
// format ({"t_ns": ..., "key": ..., "cost": ...}; the key is the caller),
// as a scenario whose events are its lines, timed from the first one.
func TraceScenario(name string, r io.Reader) (Scenario, error) {
	var ev []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var t0 int64
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l struct {
			TNs  *int64   `json:"t_ns"`
			Key  string   `json:"key"`
			Path []string `json:"path"`
			Cost *int64   `json:"cost"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return Scenario{}, fmt.Errorf("%s: line %d: %v", name, n, err)
		}
		if l.TNs == nil {
			return Scenario{}, fmt.Errorf("%s: line %d: a trace needs t_ns on every line", name, n)
		}
		caller := l.Key
		if len(l.Path) > 0 {
			caller = l.Path[len(l.Path)-1]
		}
		if caller == "" {
			return Scenario{}, fmt.Errorf("%s: line %d: no key (or path) to name the caller", name, n)
		}
		if len(ev) == 0 {
			t0 = *l.TNs
		}
		at := time.Duration(*l.TNs - t0)
		if at < 0 || len(ev) > 0 && at < ev[len(ev)-1].At {
			return Scenario{}, fmt.Errorf("%s: line %d: t_ns goes back", name, n)
		}
		cost := int64(1)
		if l.Cost != nil {
			cost = *l.Cost
		}
		if !add(&ev, Event{At: at, Caller: caller, Cost: cost}) {
			return Scenario{}, fmt.Errorf("%s: more than %d requests", name, maxEvents)
		}
	}
	if err := sc.Err(); err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", name, err)
	}
	if len(ev) == 0 {
		return Scenario{}, fmt.Errorf("%s: no events", name)
	}
	d := ev[len(ev)-1].At + time.Nanosecond
	return Scenario{
		Name: name, Description: fmt.Sprintf("the %d requests of %s", len(ev), name),
		Defaults: Params{Duration: d},
		Events:   func(uint64, Params) []Event { return ev },
	}, nil
}
