package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/queue/backend"
)

// The store's admission queues (backend.Queues) are Redis Streams: a queue
// is a stream with one consumer group, admitted by one script (XLEN,
// XADD, never trimmed), read with XREADGROUP, claimed with XAUTOCLAIM,
// acked and deleted only once handled. Its keys share one hash tag, so
// they live in one Cluster hash slot: the stream, its dead letters, and hashes
// for counters, dedup ids, last errors and the dedup ids of entries
// handled within backend.DedupWindow (with a zset of when each is
// forgotten).

var (
	_ backend.Queues = (*Store)(nil)

	queueAddScript     = embeddedScript("queue_rate.lua", "queue_admit.lua", "queue_add.lua")
	queueRequeueScript = embeddedScript("queue_rate.lua", "queue_admit.lua", "queue_requeue.lua")
	queueAckScript     = embeddedScript("queue_rate.lua", "queue_ack.lua")
	queueClaimScript   = embeddedScript("queue_claim.lua")
	queueFailScript    = embeddedScript("queue_fail.lua")
	queueRateScript    = embeddedScript("queue_rate.lua", "queue_drain_rate.lua")
)

type queue struct {
	s                                        *Store
	group                                    string
	stream, dead, meta, dedup, errs          string
	keysAdd, keysRequeue, keysAck, keysClaim []string
	// dedupWindow is backend.DedupWindow in ms, an ARGV of queue_ack.lua
	// (shorter in tests).
	dedupWindow string
}

// queueKey names a queue's stream: the store's prefix, then the escaped
// name (escaped as sluice.Key escapes, which leaves no brace) as a hash tag. The queue's
// other keys add a suffix to it.
func queueKey(prefix, name string) string {
	return prefix + "{queue:" + keys.Escape(name) + "}"
}

// Queue implements backend.Queues: the capacity is the meta hash's
// 'capacity' field, and the stream and its group are created when
// missing.
func (s *Store) Queue(ctx context.Context, name, group string, capacity int) (backend.Queue, error) {
	base := queueKey(s.prefix, name)
	q := &queue{s: s, group: group, stream: base, dead: base + ":dead", meta: base + ":meta",
		dedup: base + ":dedup", errs: base + ":errors", dedupWindow: strconv.FormatInt(backend.DedupWindow.Milliseconds(), 10)}
	handled, handledAt := base+":handled", base+":handled-at"
	q.keysAdd = []string{q.stream, q.meta, q.dedup, handled, handledAt}
	q.keysRequeue = []string{q.stream, q.meta, q.dedup, handled, handledAt, q.dead}
	q.keysAck = []string{q.stream, q.meta, q.dedup, q.errs, handled, handledAt}
	q.keysClaim = []string{q.stream, q.meta}
	c, err := s.clientOrErr()
	if err != nil {
		return nil, err
	}
	if capacity > 0 {
		err = c.Do(ctx, c.B().Hsetnx().Key(q.meta).Field("capacity").Value(strconv.Itoa(capacity)).Build()).Error()
	} else if _, err = q.Capacity(ctx); errors.Is(err, backend.ErrNoQueue) {
		return nil, err // nothing created for a name never defined
	}
	if err != nil {
		return nil, err
	}
	if group == "" {
		return q, nil // to define the queue: no group to create
	}
	err = c.Do(ctx, c.B().XgroupCreate().Key(q.stream).Group(group).Id("0").Mkstream().Build()).Error()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("redis store: create group %q: %w", group, err)
	}
	return q, nil
}

// QueuesShared implements backend.Queues: every process on the same Redis
// shares them.
func (s *Store) QueuesShared() bool { return true }

// QueueWarning implements backend.Queues: a maxmemory-policy that may evict
// keys would lose entries.
func (s *Store) QueueWarning(ctx context.Context) string {
	c, err := s.clientOrErr()
	if err != nil {
		return ""
	}
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil {
		return ""
	}
	if p := m["maxmemory-policy"]; p != "" && p != "noeviction" {
		return fmt.Sprintf("Redis maxmemory-policy is %q: under memory pressure Redis may evict queue entries; use noeviction", p)
	}
	return ""
}

func (q *queue) Add(ctx context.Context, dedup string, fields []byte) (backend.Added, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return backend.Added{}, err
	}
	a, _, err := admitted(queueAddScript.Exec(ctx, c, q.keysAdd, []string{dedup, string(fields)}))
	return a, err
}

// admitted reads queue_admit.lua's reply; found is false for a requeue of
// no dead letter.
func admitted(r rueidis.RedisResult) (a backend.Added, found bool, err error) {
	v, err := r.ToArray()
	if err != nil {
		return a, false, err
	}
	if len(v) != 4 {
		return a, false, fmt.Errorf("queue_admit.lua: reply of %d values", len(v))
	}
	status, _ := v[0].AsInt64()
	a.ID, _ = v[1].ToString()
	a.Length, _ = v[2].AsInt64()
	switch status {
	case 1:
		a.Outcome = backend.New
	case 2:
		a.Outcome = backend.Duplicate
	case 3:
		a.Outcome = backend.Conflict
	case 4:
		return a, false, backend.ErrNoQueue
	case 5:
		return a, false, nil
	default:
		a.Outcome = backend.Full
		rs, _ := v[3].ToString()
		a.DrainRate, _ = strconv.ParseFloat(rs, 64)
	}
	return a, true, nil
}

func (q *queue) Capacity(ctx context.Context) (int, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return 0, err
	}
	n, err := c.Do(ctx, c.B().Hget().Key(q.meta).Field("capacity").Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, backend.ErrNoQueue
	}
	return int(n), err
}

func (q *queue) Define(ctx context.Context, capacity int) error {
	c, err := q.s.clientOrErr()
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Hset().Key(q.meta).FieldValue().FieldValue("capacity", strconv.Itoa(capacity)).Build()).Error()
}

func (q *queue) Requeue(ctx context.Context, deadID string) (backend.Added, bool, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return backend.Added{}, false, err
	}
	return admitted(queueRequeueScript.Exec(ctx, c, q.keysRequeue, []string{deadID}))
}

func (q *queue) Drop(ctx context.Context, deadID string) (bool, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return false, err
	}
	n, err := c.Do(ctx, c.B().Xdel().Key(q.dead).Id(deadID).Build()).AsInt64()
	return n == 1, err
}

func (q *queue) Read(ctx context.Context, consumer string, count int, block time.Duration) ([]backend.Entry, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return nil, err
	}
	cmd := c.B().Xreadgroup().Group(q.group, consumer).Count(int64(count)).Block(block.Milliseconds()).
		Streams().Key(q.stream).Id(">").Build()
	res, err := c.Do(ctx, cmd).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []backend.Entry
	for _, xs := range res {
		for _, x := range xs {
			out = append(out, queueEntry(x.ID, x.FieldValues, 1))
		}
	}
	if len(out) > 0 {
		c.Do(ctx, c.B().Hincrby().Key(q.meta).Field("delivered").Increment(int64(len(out))).Build())
	}
	return out, nil
}

// queueEntry is an entry from its stream fields: f (the fields), d (the
// dedup id).
func queueEntry(id string, fv map[string]string, deliveries int64) backend.Entry {
	return backend.Entry{ID: id, Fields: []byte(fv["f"]), Dedup: fv["d"], Deliveries: deliveries}
}

func (q *queue) Claim(ctx context.Context, consumer string, minIdle time.Duration, cursor string, count int) (string, []backend.Entry, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return "", nil, err
	}
	v, err := queueClaimScript.Exec(ctx, c, q.keysClaim, []string{q.group, consumer,
		strconv.FormatInt(minIdle.Milliseconds(), 10), cursor, strconv.Itoa(count)}).ToArray()
	if err != nil {
		return "", nil, err
	}
	if len(v) == 0 {
		return "", nil, fmt.Errorf("queue_claim.lua: empty reply")
	}
	next, _ := v[0].ToString()
	var out []backend.Entry
	for _, x := range v[1:] {
		t, err := x.ToArray()
		if err != nil || len(t) != 3 {
			return "", nil, fmt.Errorf("queue_claim.lua: bad entry")
		}
		id, _ := t[0].ToString()
		fv, err := t[1].AsStrMap()
		if err != nil {
			return "", nil, fmt.Errorf("queue_claim.lua: entry %s: %w", id, err)
		}
		deliveries, _ := t[2].AsInt64()
		out = append(out, queueEntry(id, fv, deliveries))
	}
	return next, out, nil
}

func (q *queue) Fail(ctx context.Context, id, msg string) error {
	c, err := q.s.clientOrErr()
	if err != nil {
		return err
	}
	return queueFailScript.Exec(ctx, c, []string{q.stream, q.errs}, []string{id, msg}).Error()
}

func (q *queue) LastError(ctx context.Context, id string) (string, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return "", err
	}
	s, err := c.Do(ctx, c.B().Hget().Key(q.errs).Field(id).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return s, err
}

func (q *queue) Ack(ctx context.Context, id string, dead bool) (bool, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return false, err
	}
	counter := "acked"
	if dead {
		counter = "dead"
	}
	n, err := queueAckScript.Exec(ctx, c, q.keysAck, []string{q.group, id, counter, q.dedupWindow}).AsInt64()
	return n == 1, err
}

func (q *queue) AckAll(ctx context.Context, ids []string, done []bool) error {
	if len(ids) == 1 {
		var err error
		done[0], err = q.Ack(ctx, ids[0], false)
		return err
	}
	c, err := q.s.clientOrErr()
	if err != nil {
		return err
	}
	execs := make([]rueidis.LuaExec, len(ids))
	for i, id := range ids {
		execs[i] = rueidis.LuaExec{Keys: q.keysAck, Args: []string{q.group, id, "acked", q.dedupWindow}}
	}
	for i, r := range queueAckScript.ExecMulti(ctx, c, execs...) {
		n, err := r.AsInt64()
		if err != nil {
			return err
		}
		done[i] = n == 1
	}
	return nil
}

func (q *queue) DeadLetter(ctx context.Context, e backend.Entry, msg string) error {
	c, err := q.s.clientOrErr()
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Xadd().Key(q.dead).Id("*").FieldValue().
		FieldValue("id", e.ID).FieldValue("f", string(e.Fields)).FieldValue("d", e.Dedup).
		FieldValue("deliveries", strconv.FormatInt(e.Deliveries, 10)).
		FieldValue("error", msg).Build()).Error()
}

func (q *queue) DeadLetters(ctx context.Context, count int) ([]backend.DeadLetter, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return nil, err
	}
	xs, err := c.Do(ctx, c.B().Xrange().Key(q.dead).Start("-").End("+").Count(int64(count)).Build()).AsXRange()
	if err != nil {
		return nil, err
	}
	out := make([]backend.DeadLetter, 0, len(xs))
	for _, x := range xs {
		deliveries, _ := strconv.ParseInt(x.FieldValues["deliveries"], 10, 64)
		out = append(out, backend.DeadLetter{Entry: queueEntry(x.FieldValues["id"], x.FieldValues, deliveries), DeadID: x.ID, Error: x.FieldValues["error"]})
	}
	return out, nil
}

func (q *queue) Stats(ctx context.Context) (backend.Stats, error) {
	c, err := q.s.clientOrErr()
	if err != nil {
		return backend.Stats{}, err
	}
	rs := c.DoMulti(ctx,
		c.B().Xlen().Key(q.stream).Build(),
		c.B().Xpending().Key(q.stream).Group(q.group).Build(),
		c.B().XinfoGroups().Key(q.stream).Build(),
		c.B().Xlen().Key(q.dead).Build(),
		c.B().Hmget().Key(q.meta).Field("admitted", "delivered", "acked", "capacity").Build(),
	)
	for _, r := range rs {
		if err := r.Error(); err != nil {
			return backend.Stats{}, err
		}
	}
	var s backend.Stats
	s.Length, _ = rs[0].AsInt64()
	if p, err := rs[1].ToArray(); err == nil && len(p) > 0 {
		s.Pending, _ = p[0].AsInt64()
	}
	if gs, err := rs[2].ToArray(); err == nil {
		for _, g := range gs {
			m, err := g.AsMap()
			if err != nil {
				continue
			}
			name, consumers := m["name"], m["consumers"]
			if n, _ := name.ToString(); n == q.group {
				s.Consumers, _ = consumers.AsInt64()
			}
		}
	}
	s.DeadLetters, _ = rs[3].AsInt64()
	if v, err := rs[4].ToArray(); err == nil && len(v) == 4 {
		s.Admitted, _ = v[0].AsInt64()
		s.Delivered, _ = v[1].AsInt64()
		s.Acked, _ = v[2].AsInt64()
		capacity, _ := v[3].AsInt64()
		s.Capacity = int(capacity)
	}
	rate, err := queueRateScript.Exec(ctx, c, []string{q.meta}, nil).ToString()
	if err != nil {
		return s, err
	}
	s.DrainRate, err = strconv.ParseFloat(rate, 64)
	return s, err
}

func (q *queue) Leave(ctx context.Context, consumer string) error {
	c, err := q.s.clientOrErr()
	if err != nil {
		return err
	}
	p, err := c.Do(ctx, c.B().Xpending().Key(q.stream).Group(q.group).Start("-").End("+").Count(1).Consumer(consumer).Build()).ToArray()
	if err != nil || len(p) > 0 {
		return err
	}
	return c.Do(ctx, c.B().XgroupDelconsumer().Key(q.stream).Group(q.group).Consumername(consumer).Build()).Error()
}
