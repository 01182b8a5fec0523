package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Coalescing: coalesce.lua takes several decisions in one call, each all or
// nothing on its own, as decide.lua takes one. On a single Redis server
// (not a Cluster, whose decisions may lie in different hash slots), when fewer
// than maxInflight calls are in flight a decision goes out at once, alone
// (decide.lua); while they all are,
// decisions queue, and a call that ends hands the queue (up to maxCoalesced)
// to its first decision, whose caller sends it (on a goroutine of its
// own, so that no caller waits past its deadline). An idle store adds no
// latency and no goroutine; a busy one pays Redis's per-command cost
// (reading, parsing, the script call, TIME) once per group instead of once
// per decision.

const (
	maxInflight  = 4
	maxCoalesced = 32
)

// pending is one decision: its kinds, keys and decide.lua arguments (now,
// then its levels), and, once done is closed, its own part of the reply
// or the error. A queued decision may be handed a group to send (lead).
type pending struct {
	set      kindSet
	keys     []string
	args     []string
	levels   int
	deadline time.Time // its caller's: a group waits for the latest
	reply    []int64
	err      error
	done     chan struct{}
	lead     chan []*pending
}

// coalescer is a store's calls in flight and the decisions waiting for one.
type coalescer struct {
	mu       sync.Mutex
	inflight int
	queue    []*pending
}

// decideCoalesced decides p: at once when a call is free, else from the queue.
func (s *Store) decideCoalesced(ctx context.Context, p *pending) error {
	b := &s.coalesce
	b.mu.Lock()
	if b.inflight < maxInflight {
		b.inflight++
		b.mu.Unlock()
		// On a goroutine of its own, so that the caller returns by its
		// deadline even when rueidis does not: a connection it dials on
		// first use (again after a break) against a Redis that has stopped
		// answering is closed a second after the handshake fails.
		go s.send([]*pending{p})
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return fmt.Errorf("redis store: %w", ctx.Err())
		}
	}
	p.lead = make(chan []*pending, 1)
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case group := <-p.lead:
		// The group waits for its latest deadline, p for its own.
		go s.send(group)
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return fmt.Errorf("redis store: %w", ctx.Err())
		}
	case <-p.done:
		return p.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, p); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()
		return fmt.Errorf("redis store: %w", ctx.Err())
	}
	b.mu.Unlock()
	// p is in a group; if it was to send it, the group goes on without us
	// (handed over under the lock, so it is in lead by now). As with a
	// call of our own whose answer comes too late, the decision may still
	// be applied.
	select {
	case group := <-p.lead:
		go s.send(group)
	default:
	}
	return fmt.Errorf("redis store: %w", ctx.Err())
}

// send runs a group until the latest of its callers' deadlines, then hands
// the queue to its first decision, or frees the call.
func (s *Store) send(group []*pending) {
	deadline := group[0].deadline
	for _, p := range group[1:] {
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := s.execCoalesced(ctx, group)
	cancel()
	for _, p := range group {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
	b := &s.coalesce
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inflight--
		return
	}
	n := min(len(b.queue), maxCoalesced)
	next := slices.Clone(b.queue[:n])
	b.queue = append(b.queue[:0], b.queue[n:]...)
	next[0].lead <- next
}

// execCoalesced runs the decisions of group, one alone with decide.lua,
// several with coalesce.lua, and gives each its part of the reply.
func (s *Store) execCoalesced(ctx context.Context, group []*pending) error {
	if len(group) == 1 {
		p := group[0]
		v, err := decideDriver.script(p.set).Exec(ctx, s.client(), p.keys, p.args).AsIntSlice()
		if err != nil {
			return fmt.Errorf("redis store: %w", err)
		}
		p.reply = v
		return nil
	}
	var set kindSet
	nkeys, nargs := 0, 1
	for _, p := range group {
		set |= p.set
		nkeys += len(p.keys)
		nargs += len(p.args) + 1
	}
	keys, args := make([]string, 0, nkeys), make([]string, 1, nargs)
	args[0] = strconv.Itoa(len(group))
	for _, p := range group {
		keys = append(keys, p.keys...)
		args = append(args, p.args[0], strconv.Itoa(p.levels))
		args = append(args, p.args[1:]...)
	}
	msgs, err := coalesceDriver.script(set).Exec(ctx, s.client(), keys, args).ToArray()
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	short := fmt.Errorf("redis store: script replied %d values for %d decisions", len(msgs), len(group))
	v := make([]int64, len(msgs))
	for j := range msgs {
		if msgs[j].IsString() {
			continue // a failed decision's error
		}
		if v[j], err = msgs[j].AsInt64(); err != nil {
			return fmt.Errorf("redis store: script replied %v", msgs[j])
		}
	}
	at := 0
	for _, p := range group {
		start := at
		if at+2 > len(msgs) {
			return short
		}
		if v[at+1] == -1 && at+2 < len(msgs) {
			msg, _ := msgs[at+2].ToString()
			p.err = fmt.Errorf("redis store: %s", msg)
			at += 3
			continue
		}
		at += 2
		for range p.levels {
			if at+1 >= len(msgs) || v[at] < 0 {
				return short
			}
			at += 2 + int(v[at]>>1)
		}
		if at > len(msgs) {
			return short
		}
		p.reply = v[start:at:at]
	}
	if at != len(msgs) {
		return short
	}
	return nil
}

// exec runs one decision (decide.lua's arguments for it: now, then its
// levels) and returns its reply: coalesced on a single server, in a call of
// its own on a Cluster.
func (s *Store) exec(ctx context.Context, set kindSet, keys, args []string, levels int) ([]int64, error) {
	p := &pending{set: set, keys: keys, args: args, levels: levels, done: make(chan struct{})}
	if s.client().Mode() == rueidis.ClientModeCluster {
		errc := make(chan error, 1)
		go func() { errc <- s.execCoalesced(ctx, []*pending{p}) }() // see decideCoalesced
		select {
		case err := <-errc:
			return p.reply, err
		case <-ctx.Done():
			return nil, fmt.Errorf("redis store: %w", ctx.Err())
		}
	}
	p.deadline, _ = ctx.Deadline() // connected gave ctx one
	if err := s.decideCoalesced(ctx, p); err != nil {
		return nil, err
	}
	return p.reply, nil
}
