package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	_ "github.com/sluicehq/sluice/store/memory" // the memory store
	_ "github.com/sluicehq/sluice/store/redis"  // the redis:// store
)

// event is one line of replay input.
type event struct {
	TNs  *int64     `json:"t_ns"`
	Key  string     `json:"key"`
	Spec *algo.Spec `json:"limit"`
	Path []string   `json:"path"` // with --policy, instead of key and limit
	Cost *int64     `json:"cost"`
	// A concurrency limit's permit id and op (acquire, renew, release).
	Permit int64  `json:"permit"`
	Op     string `json:"op"`
}

// slotOp returns the event's op (acquire when left out).
func (ev event) slotOp() (algo.SlotOp, error) {
	for _, op := range []algo.SlotOp{algo.Acquire, algo.Renew, algo.Release} {
		if ev.Op == op.String() || ev.Op == "" && op == algo.Acquire {
			return op, nil
		}
	}
	return 0, fmt.Errorf(`"op" must be acquire, renew or release, got %q`, ev.Op)
}

// resultLine is one line of replay output.
type resultLine struct {
	Allowed      bool   `json:"allowed"`
	Quota        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterNs int64  `json:"retry_after_ns"`
	ResetAfterNs int64  `json:"reset_after_ns"`
	Admitted     int64  `json:"admitted"`
	DeniedBy     string `json:"denied_by,omitempty"`
}

const maxLine = 1 << 20

func runReplay(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "replay", `usage: sluice replay [--store URL] [--policy limits.yaml] < events.jsonl

Each input line is one decision, applied in order:
  {"t_ns": 1800003000334587000, "key": "a", "limit": {"algorithm": "gcra", "burst": 15, "count": 30, "period": "60s"}, "cost": 1}
t_ns is the decision time in ns since the epoch (the store's clock when left
out) and cost defaults to 1. A limit is written as in limits.yaml; one of
each algorithm:
`+limitExamples()+`(sliding_log's mode is binary, nary or uniform, and its limits may be named:
{"hour": {limit, window}}; window_counter's slice defaults to 1s.)
A concurrency event may name a permit id and
an op: {"permit": 7, "op": "acquire"} (the default op), "renew" or "release";
without a permit an acquire takes slots for no one, and a release frees cost
such slots.
Each output line is one result:
  {"allowed": true, "limit": 16, "remaining": 15, "retry_after_ns": 0, "reset_after_ns": 2000000000, "admitted": 1}
retry_after_ns is -1 when the cost can never be admitted; admitted is how much
of the cost was admitted (part of it for a nary sliding_log). A denied
sliding_log or window_counter decision adds "denied_by": the name or window
of the limit it waits for, or "min_gap"; for a release, admitted is the
slots freed. A bad line stops the replay with an error naming its line
number.

With --policy, events name a path in the policy tree instead:
  {"t_ns": 1800003000334587000, "path": ["user", "alex", "trade"], "cost": 1}
(with "permit" and "op" for the path's concurrency limits)
and each result is the summary plus every level the path hit (the body of
sluice serve's POST /v1/check):
  {"allowed": true, "limit": 6, "remaining": 5, ..., "matched": true, "levels": [...]}

flags:`)
	storeURL := fs.String("store", "memory", "store URL: memory or redis://host:port/db")
	policyFile := fs.String("policy", "", "a limits.yaml: events name a path instead of a key and a limit")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "replay: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	st, err := store.Open(ctx, *storeURL, store.Options{})
	if err != nil {
		fmt.Fprintf(e.stderr, "replay: %v\n", err)
		return 1
	}
	defer st.Close()
	apply := func(line []byte) (any, error) {
		req, op, permit, err := parseEvent(line)
		if err != nil {
			return nil, err
		}
		var r algo.Result
		if op != nil {
			res := make([]algo.Result, 1)
			_, err = store.DecideSlots(ctx, st, *op, []store.Request{req}, permit, res)
			r = res[0]
		} else {
			r, err = st.Decide(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		return resultLine{r.Allowed, r.Quota, r.Remaining, int64(r.RetryAfter), int64(r.ResetAfter), r.Admitted, algo.DeniedBy(req.Plan.Limit(), r.DeniedBy)}, nil
	}
	if *policyFile != "" {
		p, err := policy.Load(*policyFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "replay: %v\n", err)
			return 1
		}
		c := &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
		var d policy.Decision
		apply = func(line []byte) (any, error) {
			ev, err := decodeEvent(line)
			if err != nil {
				return nil, err
			}
			if ev.Key != "" || ev.Spec != nil || len(ev.Path) == 0 {
				return nil, errors.New(`with --policy an event names a "path", not a "key" or "limit"`)
			}
			op, err := ev.slotOp()
			if err != nil {
				return nil, err
			}
			q := &policy.Query{Time: ev.time(), Permit: ev.Permit, Paths: []policy.PathQuery{{Path: ev.Path, Cost: ev.cost()}}}
			switch {
			case op == algo.Renew:
				q.Op = policy.Renew
			case op == algo.Release:
				q.Op = policy.Release
			case ev.Permit != 0:
				q.Op = policy.Acquire
			}
			if err := c.Decide(ctx, q, &d); err != nil {
				return nil, err
			}
			return json.RawMessage(server.AppendDecisionJSON(nil, &d)), nil
		}
	}

	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		res, err := apply(line)
		if err == nil {
			err = enc.Encode(res)
		}
		if err != nil {
			out.Flush()
			fmt.Fprintf(e.stderr, "replay: line %d: %v\n", n, err)
			return 1
		}
	}
	if err := sc.Err(); err != nil {
		out.Flush()
		fmt.Fprintf(e.stderr, "replay: reading input: %v\n", err)
		return 1
	}
	return 0
}

// decodeEvent decodes one line strictly: one JSON object, known fields.
func decodeEvent(line []byte) (event, error) {
	var ev event
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return ev, fmt.Errorf("bad JSON: %w", err)
	}
	if dec.More() {
		return ev, errors.New("bad JSON: more than one value on the line")
	}
	return ev, nil
}

// time is the event's explicit time, or the zero Time for the store's clock.
func (ev event) time() time.Time {
	if ev.TNs == nil {
		return time.Time{}
	}
	return time.Unix(0, *ev.TNs)
}

// limitExamples lists the example limit of every algorithm as JSON, a
// line each, for replay's usage.
func limitExamples() string {
	var b strings.Builder
	for _, k := range algo.Kinds() {
		j, _ := json.Marshal(k.Example().Spec())
		fmt.Fprintf(&b, "  %s\n", j)
	}
	return b.String()
}

// cost is the event's cost, 1 when left out.
func (ev event) cost() int64 {
	if ev.Cost == nil {
		return 1
	}
	return *ev.Cost
}

// parseEvent returns the request of an event without a path, and for an
// event that names a permit or an op the slot operation to apply
// (store.DecideSlots) and its permit.
func parseEvent(line []byte) (store.Request, *algo.SlotOp, int64, error) {
	ev, err := decodeEvent(line)
	if err != nil {
		return store.Request{}, nil, 0, err
	}
	if ev.Path != nil {
		return store.Request{}, nil, 0, errors.New(`an event with a "path" needs --policy`)
	}
	if ev.Spec == nil {
		return store.Request{}, nil, 0, errors.New(`missing "limit"`)
	}
	lim, err := ev.Spec.Build()
	if err != nil {
		return store.Request{}, nil, 0, fmt.Errorf("limit: %w", err)
	}
	p, err := algo.Compile(lim)
	if err != nil {
		return store.Request{}, nil, 0, err
	}
	req := store.Request{Key: ev.Key, Plan: &p, Cost: ev.cost(), Time: ev.time()}
	if err := store.Validate(req.Key, req.Tag, req.Plan, req.Cost, req.Time); err != nil {
		return store.Request{}, nil, 0, err
	}
	if ev.Permit != 0 || ev.Op != "" {
		op, err := ev.slotOp()
		if err != nil {
			return store.Request{}, nil, 0, err
		}
		q := p // a check only: DecideSlots applies the permit
		if err := algo.ForPermit(&q, ev.Permit, op); err != nil {
			return store.Request{}, nil, 0, err
		}
		return req, &op, ev.Permit, nil
	}
	return req, nil, 0, nil
}
