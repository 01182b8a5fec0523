package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Batching: decide.lua takes several decisions in one call, each all or
// nothing on its own. On a single Redis server (not a Cluster, whose
// decisions may lie in different slots) the store sends every decision
// through a batcher: when fewer than batchSlots calls are in flight, a
// decision goes out at once, alone; while they all are, decisions queue,
// and the next call takes up to maxBatch of them. An idle store adds no
// latency; a busy one pays Redis's per-command cost (reading, parsing,
// the script call, TIME) once per batch instead of once per decision.

const (
	batchSlots = 4
	maxBatch   = 32
)

// pending is one decision waiting for its batch: its kinds, keys and
// decide.lua arguments (now, then its levels), and, once done is closed,
// its own part of the reply or the batch's error.
type pending struct {
	set      kindSet
	keys     []string
	args     []string
	levels   int
	deadline time.Time // its caller's: the batch waits for the latest
	reply    []int64
	err      error
	done     chan struct{}
}

type batcher struct {
	s     *Store
	queue chan *pending
	slots chan struct{}
}

func newBatcher(s *Store) *batcher {
	b := &batcher{s: s, queue: make(chan *pending, cap(s.inflight)), slots: make(chan struct{}, batchSlots)}
	go b.loop()
	return b
}

// loop takes a slot, then as many queued decisions as there are (up to
// maxBatch), and sends them in one call.
func (b *batcher) loop() {
	for {
		var first *pending
		select {
		case first = <-b.queue:
		case <-b.s.stop:
			return
		}
		b.slots <- struct{}{}
		batch := []*pending{first}
	gather:
		for len(batch) < maxBatch {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		go func() {
			defer func() { <-b.slots }()
			b.run(batch)
		}()
	}
}

// run sends a batch. A decision that fails in the script fails alone
// (decide.lua catches its error); a failed call fails them all.
func (b *batcher) run(batch []*pending) {
	deadline := batch[0].deadline
	for _, p := range batch[1:] {
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := b.s.execBatch(ctx, batch); err != nil {
		for _, p := range batch {
			p.err = err
		}
	}
	for _, p := range batch {
		close(p.done)
	}
}

// execBatch runs decide.lua on the decisions of batch and gives each its
// part of the reply.
func (s *Store) execBatch(ctx context.Context, batch []*pending) error {
	var set kindSet
	nkeys, nargs := 0, 1
	for _, p := range batch {
		set |= p.set
		nkeys += len(p.keys)
		nargs += len(p.args) + 1
	}
	keys, args := make([]string, 0, nkeys), make([]string, 1, nargs)
	args[0] = strconv.Itoa(len(batch))
	for _, p := range batch {
		keys = append(keys, p.keys...)
		args = append(args, p.args[0], strconv.Itoa(p.levels))
		args = append(args, p.args[1:]...)
	}
	msgs, err := decideDriver.script(set).Exec(ctx, s.client(), keys, args).ToArray()
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	short := fmt.Errorf("redis store: script replied %d values for %d decisions", len(msgs), len(batch))
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
	for _, p := range batch {
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
// levels) and returns its reply: through the batcher on a single server,
// in a call of its own on a Cluster.
func (s *Store) exec(ctx context.Context, set kindSet, keys, args []string, levels int) ([]int64, error) {
	p := &pending{set: set, keys: keys, args: args, levels: levels, done: make(chan struct{})}
	p.deadline, _ = ctx.Deadline() // connected gave ctx one
	if s.client().Mode() == rueidis.ClientModeCluster {
		err := s.execBatch(ctx, []*pending{p})
		return p.reply, err
	}
	s.batchOnce.Do(func() { s.batch = newBatcher(s) })
	select {
	case s.batch.queue <- p:
	case <-ctx.Done():
		return nil, fmt.Errorf("redis store: %w", ctx.Err())
	}
	select {
	case <-p.done:
		return p.reply, p.err
	case <-ctx.Done():
		// The batch goes on without us: as with a call of our own whose
		// answer comes too late, the decision may still have been applied.
		return nil, fmt.Errorf("redis store: %w", ctx.Err())
	}
}
