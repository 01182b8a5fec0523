package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/redis"
)

// Consumers lists ("the metadata list pattern"): a check may carry meta,
// such as {"user_id": "u-17"}. When such a check is admitted with a cost
// above 0, an entry {at, cost, meta} is pushed onto a capped list of every
// level on its path (shadow levels included), newest first, keeping the
// last consumers.max entries (default 20) and expiring consumers.ttl
// (default 1h) after the last push. So an operator who sees a shared key
// such as tigerfeeding (or an api key shared by a team) run dry can ask
// GET /admin/v1/consumers who used it up. Denied checks and peeks are not
// recorded: the list is about what was consumed.
//
// Recording is best effort and off the decision's path: entries go
// through a bounded queue to a background writer, which batches them (one
// pipelined round trip for many entries on Redis). When the queue is full
// or the store fails, entries are dropped and counted in
// sluice_consumers_dropped_total.
//
// On Redis a list is a key next to the level's state, named with
// redis.KeyName(prefix, levelKey+"#consumers", tag) so that it lives in the
// level's Cluster slot, written by one script: LPUSH, LTRIM, PEXPIRE. On
// the memory store it is a ring per key in this process.

// Consumer is one entry of a consumers list.
type Consumer struct {
	At   time.Time       `json:"at"`
	Cost int64           `json:"cost"`
	Meta json.RawMessage `json:"meta"`
}

// consumersSuffix names a level's consumers list after its key.
const consumersSuffix = "#consumers"

type consumerItem struct {
	key, tag string
	entry    []byte // the Consumer as JSON
}

type consumerSink interface {
	push(ctx context.Context, items []consumerItem) error
	recent(ctx context.Context, key, tag string) ([]Consumer, error)
}

type consumerRecorder struct {
	sink    consumerSink
	q       chan consumerItem
	dropped prometheus.Counter
	log     *slog.Logger
	done    chan struct{}
	once    sync.Once
}

const consumerQueue = 4096

func newConsumerRecorder(be *backend, c ConsumersConfig, dropped prometheus.Counter, log *slog.Logger) *consumerRecorder {
	r := &consumerRecorder{dropped: dropped, log: log, done: make(chan struct{})}
	if c.Max < 0 {
		close(r.done)
		return r
	}
	ttl := time.Duration(c.TTL)
	if be.redis != nil {
		r.sink = &redisConsumers{conn: be.redis, prefix: be.prefix, max: c.Max, ttl: ttl}
	} else {
		r.sink = newMemoryConsumers(c.Max, ttl)
	}
	r.q = make(chan consumerItem, consumerQueue)
	go r.run()
	return r
}

// record queues an entry for every level; it never blocks.
func (r *consumerRecorder) record(levels []policy.Hit, cost int64, meta json.RawMessage) {
	if r.q == nil || len(levels) == 0 {
		return
	}
	e := make([]byte, 0, 64+len(meta))
	e = append(e, `{"at":"`...)
	e = time.Now().UTC().AppendFormat(e, time.RFC3339Nano)
	e = append(e, `","cost":`...)
	e = strconv.AppendInt(e, cost, 10)
	e = append(e, `,"meta":`...)
	e = append(e, meta...)
	e = append(e, '}')
	for _, lv := range levels {
		select {
		case r.q <- consumerItem{key: lv.Key, tag: lv.Tag, entry: e}:
		default:
			r.dropped.Inc()
		}
	}
}

func (r *consumerRecorder) run() {
	defer close(r.done)
	batch := make([]consumerItem, 0, 256)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := r.sink.push(ctx, batch); err != nil {
			r.dropped.Add(float64(len(batch)))
			r.log.Debug("consumers: entries dropped", "n", len(batch), "err", err)
		}
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	for it := range r.q {
		batch = append(batch, it)
	drain:
		for len(batch) < cap(batch) {
			select {
			case it, ok := <-r.q:
				if !ok {
					break drain
				}
				batch = append(batch, it)
			default:
				break drain
			}
		}
		flush()
	}
	flush()
}

// recent returns a level's consumers, newest first ([] when none).
func (r *consumerRecorder) recent(ctx context.Context, key, tag string) ([]Consumer, error) {
	if r.sink == nil {
		return []Consumer{}, nil
	}
	return r.sink.recent(ctx, key, tag)
}

// close stops the writer after it has written what is queued.
func (r *consumerRecorder) close() {
	r.once.Do(func() {
		if r.q != nil {
			close(r.q)
		}
	})
	<-r.done
}

// --- memory ---

// memoryConsumers keeps a ring of entries per key; at most maxKeys keys
// (expired ones are swept to make room, and entries for new keys beyond
// that are dropped).
type memoryConsumers struct {
	max     int
	ttl     time.Duration
	maxKeys int
	mu      sync.Mutex
	lists   map[string]*ring
}

type ring struct {
	entries [][]byte // oldest first once full: next is the slot to write
	next    int
	n       int
	expires time.Time
}

func newMemoryConsumers(max int, ttl time.Duration) *memoryConsumers {
	return &memoryConsumers{max: max, ttl: ttl, maxKeys: 100_000, lists: map[string]*ring{}}
}

func (m *memoryConsumers) push(_ context.Context, items []consumerItem) error {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range items {
		l := m.lists[it.key]
		if l != nil && now.After(l.expires) {
			l.next, l.n = 0, 0
		}
		if l == nil {
			if len(m.lists) >= m.maxKeys {
				for k, v := range m.lists {
					if now.After(v.expires) {
						delete(m.lists, k)
					}
				}
				if len(m.lists) >= m.maxKeys {
					continue
				}
			}
			l = &ring{entries: make([][]byte, m.max)}
			m.lists[it.key] = l
		}
		if m.max == 0 {
			continue
		}
		l.entries[l.next] = it.entry
		l.next = (l.next + 1) % m.max
		l.n = min(l.n+1, m.max)
		l.expires = now.Add(m.ttl)
	}
	return nil
}

func (m *memoryConsumers) recent(_ context.Context, key, _ string) ([]Consumer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Consumer{}
	l := m.lists[key]
	if l == nil || time.Now().After(l.expires) {
		return out, nil
	}
	for i := 1; i <= l.n; i++ {
		e := l.entries[(l.next-i+m.max)%m.max]
		var c Consumer
		if json.Unmarshal(e, &c) == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// --- redis ---

var pushConsumerScript = rueidis.NewLuaScript(`
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

type redisConsumers struct {
	conn   *lazyRedis
	prefix string
	max    int
	ttl    time.Duration
}

func (r *redisConsumers) listKey(key, tag string) string {
	return redis.KeyName(r.prefix, key+consumersSuffix, tag)
}

func (r *redisConsumers) push(ctx context.Context, items []consumerItem) error {
	if r.max == 0 {
		return nil
	}
	max, ttl := strconv.Itoa(r.max), strconv.FormatInt(r.ttl.Milliseconds(), 10)
	execs := make([]rueidis.LuaExec, len(items))
	for i, it := range items {
		execs[i] = rueidis.LuaExec{Keys: []string{r.listKey(it.key, it.tag)}, Args: []string{string(it.entry), max, ttl}}
	}
	client := r.conn.client()
	if client == nil {
		return ErrNotConnected
	}
	for _, res := range pushConsumerScript.ExecMulti(ctx, client, execs...) {
		if err := res.Error(); err != nil {
			return err
		}
	}
	return nil
}

func (r *redisConsumers) recent(ctx context.Context, key, tag string) ([]Consumer, error) {
	client := r.conn.client()
	if client == nil {
		return nil, ErrNotConnected
	}
	vals, err := client.Do(ctx, client.B().Lrange().Key(r.listKey(key, tag)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, err
	}
	out := make([]Consumer, 0, len(vals))
	for _, v := range vals {
		var c Consumer
		if json.Unmarshal([]byte(v), &c) == nil {
			out = append(out, c)
		}
	}
	return out, nil
}
