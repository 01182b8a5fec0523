package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// consumer is one entry of a consumers list ("the metadata list
// pattern"): a check may carry meta, such as {"user_id": "u-17"}. When
// such a check is admitted with a cost above 0, an entry {at, cost, meta}
// is pushed onto a capped list of every level on its path (shadow levels
// included), newest first, keeping the last consumers.max entries
// (default 20) and expiring consumers.ttl (default 1h) after the last
// push. So an operator who sees a shared key such as tigerfeeding (or an
// api key shared by a team) run dry can ask GET /admin/v1/consumers who
// used it up. Denied checks and peeks are not recorded: the list is about
// what was consumed.
//
// Recording is best effort and off the decision's path: entries go
// through a bounded queue to a background writer, which batches them (one
// pipelined round trip for many entries on Redis). When the queue is full
// or the store fails, entries are dropped and counted in
// sluice_consumers_dropped_total. The store keeps the lists (a
// store.ConsumerLog): Redis next to the level's state, in its Cluster slot
// (store/redis: consumers.go); the memory store in this process.
type consumer struct {
	At   time.Time       `json:"at"`
	Cost int64           `json:"cost"`
	Meta json.RawMessage `json:"meta"`
}

type consumerRecorder struct {
	log     store.ConsumerLog // nil: the store keeps no lists, or they are off
	max     int
	ttl     time.Duration
	q       chan store.Consumed
	dropped prometheus.Counter
	logger  *slog.Logger
	done    chan struct{}
	once    sync.Once
}

const consumerQueue = 4096

func newConsumerRecorder(st store.Store, c ConsumersConfig, dropped prometheus.Counter, log *slog.Logger) *consumerRecorder {
	r := &consumerRecorder{max: c.Max, ttl: time.Duration(c.TTL), dropped: dropped, logger: log, done: make(chan struct{})}
	cl, ok := st.(store.ConsumerLog)
	if c.Max < 0 || !ok {
		close(r.done)
		return r
	}
	r.log = cl
	r.q = make(chan store.Consumed, consumerQueue)
	go r.run()
	return r
}

// record queues an entry for every level; it never blocks.
func (r *consumerRecorder) record(hits []policy.Hit, cost int64, meta json.RawMessage) {
	if r.q == nil || len(hits) == 0 {
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
	for _, h := range hits {
		select {
		case r.q <- store.Consumed{Key: h.Key, Tag: h.Tag, Entry: e}:
		default:
			r.dropped.Inc()
		}
	}
}

func (r *consumerRecorder) run() {
	defer close(r.done)
	pending := make([]store.Consumed, 0, 256)
	flush := func() {
		if len(pending) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := r.log.PushConsumers(ctx, pending, r.max, r.ttl); err != nil {
			n := len(pending)
			var d *store.DroppedError
			if errors.As(err, &d) {
				n = d.Dropped
			}
			r.dropped.Add(float64(n))
			r.logger.Debug("consumers: entries dropped", "n", len(pending), "err", err)
		}
		cancel()
		clear(pending)
		pending = pending[:0]
	}
	for it := range r.q {
		pending = append(pending, it)
	drain:
		for len(pending) < cap(pending) {
			select {
			case it, ok := <-r.q:
				if !ok {
					break drain
				}
				pending = append(pending, it)
			default:
				break drain
			}
		}
		flush()
	}
	flush()
}

// recent returns a level's consumers, newest first ([] when none).
func (r *consumerRecorder) recent(ctx context.Context, key, tag string) ([]consumer, error) {
	out := []consumer{}
	if r.log == nil {
		return out, nil
	}
	entries, err := r.log.Consumers(ctx, key, tag)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		var c consumer
		if json.Unmarshal(e, &c) == nil {
			out = append(out, c)
		}
	}
	return out, nil
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
