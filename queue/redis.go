package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redis"
)

var (
	//go:embed scripts/rate.lua
	rateLua string
	//go:embed scripts/add.lua
	addLua string
	//go:embed scripts/ack.lua
	ackLua string
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/fail.lua
	failLua string

	addScript   = rueidis.NewLuaScript(rateLua + addLua)
	ackScript   = rueidis.NewLuaScript(rateLua + ackLua)
	claimScript = rueidis.NewLuaScript(claimLua)
	failScript  = rueidis.NewLuaScript(failLua)
)

// redisQueue is a queue in a Redis stream. Its keys share one hash tag,
// so they live in one Cluster slot: the stream, its dead letters, and
// hashes for counters, dedup ids and last errors.
type redisQueue struct {
	st                              *redis.Store
	group                           string
	stream, dead, meta, dedup, errs string
	keysAdd, keysAck, keysClaim     []string
}

// queueKey names the queue's stream: the store's prefix, then the
// escaped name as a hash tag.
func queueKey(prefix, name string) string {
	return prefix + "{queue:" + strings.NewReplacer("{", "%7B", "}", "%7D").Replace(sluice.Escape(name)) + "}"
}

func openRedis(ctx context.Context, st *redis.Store, name, group string) (*redisQueue, error) {
	base := queueKey(st.Prefix(), name)
	q := &redisQueue{st: st, group: group, stream: base, dead: base + ":dead", meta: base + ":meta",
		dedup: base + ":dedup", errs: base + ":errors"}
	q.keysAdd = []string{q.stream, q.meta, q.dedup}
	q.keysAck = []string{q.stream, q.meta, q.dedup, q.errs}
	q.keysClaim = []string{q.stream, q.meta}
	c, err := q.client()
	if err != nil {
		return nil, err
	}
	err = c.Do(ctx, c.B().XgroupCreate().Key(q.stream).Group(group).Id("0").Mkstream().Build()).Error()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("create group %q: %w", group, err)
	}
	return q, nil
}

func (q *redisQueue) client() (rueidis.Client, error) {
	c := q.st.Client()
	if c == nil {
		return nil, fmt.Errorf("redis store: not connected")
	}
	return c, nil
}

// Shared reports whether queues in st are shared between processes (a
// Redis store), rather than the in-process twin.
func Shared(st sluice.Store) bool {
	_, ok := st.(*redis.Store)
	return ok
}

// EvictionWarning returns a warning when st is Redis and its
// maxmemory-policy may evict keys, which would lose entries, and ""
// otherwise (or when the policy cannot be read).
func EvictionWarning(ctx context.Context, st sluice.Store) string {
	rs, ok := st.(*redis.Store)
	if !ok {
		return ""
	}
	c := rs.Client()
	if c == nil {
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

func (q *redisQueue) add(ctx context.Context, capacity int, dedup string, fields []byte) (Added, error) {
	c, err := q.client()
	if err != nil {
		return Added{}, err
	}
	v, err := addScript.Exec(ctx, c, q.keysAdd, []string{strconv.Itoa(capacity), dedup, string(fields)}).ToArray()
	if err != nil {
		return Added{}, err
	}
	if len(v) != 4 {
		return Added{}, fmt.Errorf("add.lua: reply of %d values", len(v))
	}
	status, _ := v[0].AsInt64()
	id, _ := v[1].ToString()
	length, _ := v[2].AsInt64()
	switch status {
	case 1:
		return Added{ID: id, Length: length}, nil
	case 2:
		return Added{ID: id, Duplicate: true, Length: length}, nil
	case 3:
		return Added{ID: id, Length: length}, ErrDedupConflict
	}
	rs, _ := v[3].ToString()
	rate, _ := strconv.ParseFloat(rs, 64)
	return Added{Length: length}, &FullError{Length: length, Wait: estimate(length, int64(capacity), rate)}
}

// estimate is the wait until the queue holds fewer than capacity entries,
// at rate entries/s; 0 when the rate is unknown.
func estimate(length, capacity int64, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(length-capacity+1) / rate * float64(time.Second))
}

func (q *redisQueue) read(ctx context.Context, consumer string, count int, block time.Duration) ([]Entry, error) {
	c, err := q.client()
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
	var out []Entry
	for _, xs := range res {
		for _, x := range xs {
			e, err := entryOf(x.ID, x.FieldValues)
			if err != nil {
				return nil, err
			}
			e.Deliveries = 1
			out = append(out, e)
		}
	}
	if len(out) > 0 {
		c.Do(ctx, c.B().Hincrby().Key(q.meta).Field("delivered").Increment(int64(len(out))).Build())
	}
	return out, nil
}

func entryOf(id string, fv map[string]string) (Entry, error) {
	f, err := decodeFields([]byte(fv["f"]))
	if err != nil {
		return Entry{}, fmt.Errorf("entry %s: %w", id, err)
	}
	return Entry{ID: id, Fields: f, Dedup: fv["d"]}, nil
}

func (q *redisQueue) claim(ctx context.Context, consumer string, minIdle time.Duration, cursor string, count int) (string, []Entry, error) {
	c, err := q.client()
	if err != nil {
		return "", nil, err
	}
	v, err := claimScript.Exec(ctx, c, q.keysClaim, []string{q.group, consumer,
		strconv.FormatInt(minIdle.Milliseconds(), 10), cursor, strconv.Itoa(count)}).ToArray()
	if err != nil {
		return "", nil, err
	}
	if len(v) == 0 {
		return "", nil, fmt.Errorf("claim.lua: empty reply")
	}
	next, _ := v[0].ToString()
	var out []Entry
	for _, x := range v[1:] {
		t, err := x.ToArray()
		if err != nil || len(t) != 3 {
			return "", nil, fmt.Errorf("claim.lua: bad entry")
		}
		id, _ := t[0].ToString()
		fv, err := t[1].AsStrMap()
		if err != nil {
			return "", nil, fmt.Errorf("claim.lua: entry %s: %w", id, err)
		}
		e, err := entryOf(id, fv)
		if err != nil {
			return "", nil, err
		}
		e.Deliveries, _ = t[2].AsInt64()
		out = append(out, e)
	}
	return next, out, nil
}

func (q *redisQueue) fail(ctx context.Context, id, msg string) error {
	c, err := q.client()
	if err != nil {
		return err
	}
	return failScript.Exec(ctx, c, []string{q.stream, q.errs}, []string{id, truncate(msg)}).Error()
}

// truncate bounds a handler's error text at 4 KiB.
func truncate(msg string) string {
	const max = 4 << 10
	if len(msg) > max {
		return msg[:max]
	}
	return msg
}

func (q *redisQueue) lastError(ctx context.Context, id string) (string, error) {
	c, err := q.client()
	if err != nil {
		return "", err
	}
	s, err := c.Do(ctx, c.B().Hget().Key(q.errs).Field(id).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return s, err
}

func (q *redisQueue) ack(ctx context.Context, id string, dead bool) (bool, error) {
	c, err := q.client()
	if err != nil {
		return false, err
	}
	counter := "acked"
	if dead {
		counter = "dead"
	}
	n, err := ackScript.Exec(ctx, c, q.keysAck, []string{q.group, id, counter}).AsInt64()
	return n == 1, err
}

func (q *redisQueue) ackAll(ctx context.Context, ids []string, done []bool) error {
	if len(ids) == 1 {
		var err error
		done[0], err = q.ack(ctx, ids[0], false)
		return err
	}
	c, err := q.client()
	if err != nil {
		return err
	}
	execs := make([]rueidis.LuaExec, len(ids))
	for i, id := range ids {
		execs[i] = rueidis.LuaExec{Keys: q.keysAck, Args: []string{q.group, id, "acked"}}
	}
	for i, r := range ackScript.ExecMulti(ctx, c, execs...) {
		n, err := r.AsInt64()
		if err != nil {
			return err
		}
		done[i] = n == 1
	}
	return nil
}

func (q *redisQueue) deadLetter(ctx context.Context, e Entry, msg string) error {
	c, err := q.client()
	if err != nil {
		return err
	}
	f, err := encodeFields(e.Fields)
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Xadd().Key(q.dead).Id("*").FieldValue().
		FieldValue("id", e.ID).FieldValue("f", string(f)).
		FieldValue("deliveries", strconv.FormatInt(e.Deliveries, 10)).
		FieldValue("error", truncate(msg)).Build()).Error()
}

func (q *redisQueue) deadLetters(ctx context.Context, count int) ([]DeadLetter, error) {
	c, err := q.client()
	if err != nil {
		return nil, err
	}
	xs, err := c.Do(ctx, c.B().Xrange().Key(q.dead).Start("-").End("+").Count(int64(count)).Build()).AsXRange()
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(xs))
	for _, x := range xs {
		e, err := entryOf(x.FieldValues["id"], x.FieldValues)
		if err != nil {
			return nil, err
		}
		e.Deliveries, _ = strconv.ParseInt(x.FieldValues["deliveries"], 10, 64)
		out = append(out, DeadLetter{Entry: e, Error: x.FieldValues["error"]})
	}
	return out, nil
}

func (q *redisQueue) stats(ctx context.Context) (Stats, error) {
	c, err := q.client()
	if err != nil {
		return Stats{}, err
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
			return Stats{}, err
		}
	}
	var s Stats
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
		c, _ := v[3].AsInt64()
		s.Capacity = int(c)
	}
	s.DrainRate, err = q.drainRate(ctx, c)
	return s, err
}

// drainRate evaluates rate.lua's drain_rate without changing anything.
func (q *redisQueue) drainRate(ctx context.Context, c rueidis.Client) (float64, error) {
	s, err := rateScript.Exec(ctx, c, []string{q.meta}, nil).ToString()
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}

var rateScript = rueidis.NewLuaScript(rateLua + "\nreturn tostring(drain_rate(KEYS[1], now_us()))")

func (q *redisQueue) leave(ctx context.Context, consumer string) error {
	c, err := q.client()
	if err != nil {
		return err
	}
	p, err := c.Do(ctx, c.B().Xpending().Key(q.stream).Group(q.group).Start("-").End("+").Count(1).Consumer(consumer).Build()).ToArray()
	if err != nil || len(p) > 0 {
		return err
	}
	return c.Do(ctx, c.B().XgroupDelconsumer().Key(q.stream).Group(q.group).Consumername(consumer).Build()).Error()
}
