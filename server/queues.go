package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/queue"
)

// QueueConfig configures one admission queue, served at
// POST /v1/queues/{name}.
type QueueConfig struct {
	// Capacity is the most entries the queue holds (default 1000).
	Capacity int `yaml:"capacity"`
}

// lazyQueue opens its queue on first use: the Redis store may still be
// connecting when the server starts.
type lazyQueue struct {
	name  string
	cfg   QueueConfig
	lock  chan struct{} // held (full) while the queue is being opened
	q     atomic.Pointer[queue.Queue]
	stats queue.Stats // the last read, for /metrics; queueStats.mu held
	read  bool        // stats were read once
}

func newLazyQueue(name string, cfg QueueConfig) *lazyQueue {
	return &lazyQueue{name: name, cfg: cfg, lock: make(chan struct{}, 1)}
}

// openQueue returns lq's queue, opening it on first use. A caller
// waits for another's opening no longer than its ctx allows.
func (s *Server) openQueue(ctx context.Context, lq *lazyQueue) (*queue.Queue, error) {
	if q := lq.q.Load(); q != nil {
		return q, nil
	}
	select {
	case lq.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("queue %s: opening: %w", lq.name, ctx.Err())
	}
	defer func() { <-lq.lock }()
	if q := lq.q.Load(); q != nil {
		return q, nil
	}
	// The config is the queue's definition: its capacity is set, for
	// every producer (the CLI's too), before the queue is opened.
	if err := queue.Define(ctx, s.store, lq.name, lq.cfg.Capacity); err != nil {
		return nil, err
	}
	q, err := queue.Open(ctx, s.store, lq.name, queue.Options{Capacity: lq.cfg.Capacity})
	if err != nil {
		return nil, err
	}
	if w := queue.EvictionWarning(ctx, s.store); w != "" {
		s.log.Warn(w, "queue", lq.name)
	}
	lq.q.Store(q)
	return q, nil
}

// queueAdded is the body of a 201 (or, for a deduplicated entry, 200)
// answer to POST /v1/queues/{name}.
type queueAdded struct {
	ID        string `json:"id"`
	Length    int64  `json:"length"`
	Duplicate bool   `json:"duplicate"`
	// IdempotencyKey is the entry's dedup id: the request's
	// Idempotency-Key, or one the server made when it had none.
	IdempotencyKey string `json:"idempotency_key"`
}

// maxEchoedName bounds how much of an unknown queue's name an answer
// repeats.
const maxEchoedName = 64

// handleQueueAdd serves POST /v1/queues/{name}: the body is a JSON object
// of string fields; an Idempotency-Key header is the entry's dedup id, and
// without one the server makes one. Every answer that may have queued the
// entry carries its Idempotency-Key header. 201 with the id; 200 with the
// entry's id when the key is queued, or was handled within
// backend.DedupWindow, with the same fields; 422 with other fields; 429 with Retry-After when the
// queue is full (nothing queued); 404 for a queue not in the config; 503
// (Retry-After: 1) when the store fails: the entry may have been queued,
// and a retry with the same Idempotency-Key answers 200 if it was.
func (s *Server) handleQueueAdd(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	lq := s.queues[name]
	if lq == nil {
		shown := strconv.Quote(name)
		if len(name) > maxEchoedName {
			shown = fmt.Sprintf("%q... (%d bytes)", strings.ToValidUTF8(name[:maxEchoedName], ""), len(name))
		}
		writeProblem(w, http.StatusNotFound, "no queue "+shown+": queues are named under queues: in the config")
		return
	}
	body, ok := s.readBodyOrRefuse(w, r, nil)
	if !ok {
		return
	}
	var fields map[string]string
	if !utf8.Valid(body) {
		writeProblem(w, http.StatusBadRequest, "the body is not UTF-8")
		return
	}
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		writeProblem(w, http.StatusBadRequest, "the body must be a JSON object of string fields, such as {\"job\": \"resize\", \"id\": \"42\"}")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = queue.NewDedupID()
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	q, err := s.openQueue(ctx, lq)
	var a queue.Added
	if err == nil {
		a, err = q.Add(ctx, fields, key)
	}
	var full *queue.FullError
	switch {
	case errors.As(err, &full):
		secs := int64(1)
		if full.Wait > 0 {
			secs = int64(math.Ceil(full.Wait.Seconds()))
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		writeProblem(w, http.StatusTooManyRequests, full.Error())
	case errors.Is(err, queue.ErrBadEntry):
		writeProblem(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, queue.ErrDedupConflict):
		writeProblem(w, http.StatusUnprocessableEntity, fmt.Sprintf("Idempotency-Key %q was added (entry %s) with other fields; nothing was queued", key, a.ID))
	case err != nil:
		if n, ok := s.errLog.Allow(time.Now()); ok {
			s.log.Error("queue add failed", "queue", lq.name, "err", err, "withheld", n)
		}
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Idempotency-Key", key)
		writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf("the store failed: %v; the entry may have been queued: retry with Idempotency-Key: %s, which answers 200 with duplicate: true if it was", err, key))
	case a.Duplicate:
		w.Header().Set("Idempotency-Key", key)
		writeJSON(w, http.StatusOK, queueAdded{a.ID, a.Length, true, key})
	default:
		w.Header().Set("Idempotency-Key", key)
		writeJSON(w, http.StatusCreated, queueAdded{a.ID, a.Length, false, key})
	}
}

// queueCollector reads each opened queue's stats when scraped.
type queueCollector struct{ s *Server }

var queueDescs = struct {
	length, pending, capacity, consumers, dead, admitted, acked, rate *prometheus.Desc
}{
	length:    prometheus.NewDesc("sluice_queue_length", "Entries in the queue, waiting or being handled.", []string{"queue"}, nil),
	pending:   prometheus.NewDesc("sluice_queue_pending", "Entries delivered to a worker and not yet acked.", []string{"queue"}, nil),
	capacity:  prometheus.NewDesc("sluice_queue_capacity", "The most entries the queue holds.", []string{"queue"}, nil),
	consumers: prometheus.NewDesc("sluice_queue_consumers", "Workers known to the queue's group.", []string{"queue"}, nil),
	dead:      prometheus.NewDesc("sluice_queue_dead_letters", "Entries in the dead-letter list.", []string{"queue"}, nil),
	admitted:  prometheus.NewDesc("sluice_queue_admitted_total", "Entries admitted.", []string{"queue"}, nil),
	acked:     prometheus.NewDesc("sluice_queue_acked_total", "Entries handled and acked.", []string{"queue"}, nil),
	rate:      prometheus.NewDesc("sluice_queue_drain_rate", "Entries leaving the queue per second, over the last 10-20 s.", []string{"queue"}, nil),
}

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDescs.length
	ch <- queueDescs.pending
	ch <- queueDescs.capacity
	ch <- queueDescs.consumers
	ch <- queueDescs.dead
	ch <- queueDescs.admitted
	ch <- queueDescs.acked
	ch <- queueDescs.rate
}

// Collect reports each queue's stats as last read. It starts a read (one
// at a time) and waits for it no longer than the store's timeout, so that
// a scrape never waits on a store that has stopped answering.
func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.queueStats.Lock()
	done := s.queueStats.reading
	if done == nil {
		done = make(chan struct{})
		s.queueStats.reading = done
		go s.readQueueStats(done)
	}
	s.queueStats.Unlock()
	t := time.NewTimer(s.timeout)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	s.queueStats.Lock()
	defer s.queueStats.Unlock()
	for _, lq := range s.queues {
		if !lq.read {
			continue
		}
		st := &lq.stats
		g := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, lq.name)
		}
		g(queueDescs.length, prometheus.GaugeValue, float64(st.Length))
		g(queueDescs.pending, prometheus.GaugeValue, float64(st.Pending))
		g(queueDescs.capacity, prometheus.GaugeValue, float64(st.Capacity))
		g(queueDescs.consumers, prometheus.GaugeValue, float64(st.Consumers))
		g(queueDescs.dead, prometheus.GaugeValue, float64(st.DeadLetters))
		g(queueDescs.admitted, prometheus.CounterValue, float64(st.Admitted))
		g(queueDescs.acked, prometheus.CounterValue, float64(st.Acked))
		g(queueDescs.rate, prometheus.GaugeValue, st.DrainRate)
	}
}

// readQueueStats reads each queue's stats, each within the store's
// timeout, then closes done.
func (s *Server) readQueueStats(done chan struct{}) {
	for _, lq := range s.queues {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		q, err := s.openQueue(ctx, lq)
		var st queue.Stats
		if err == nil {
			st, err = q.Stats(ctx)
		}
		cancel()
		if err == nil {
			s.queueStats.Lock()
			lq.stats, lq.read = st, true
			s.queueStats.Unlock()
		}
	}
	s.queueStats.Lock()
	s.queueStats.reading = nil
	s.queueStats.Unlock()
	close(done)
}
