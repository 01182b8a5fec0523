package memory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/queue/backend"
)

// The store's admission queues (backend.Queues) live in this process: the
// same admission, delivery, claim, ack and dead-letter rules as the Redis
// store's streams, with no recovery across processes. They belong to the
// store: Close releases them, and wakes the readers waiting on them.

var _ backend.Queues = (*Store)(nil)

// queues are the store's queues by name.
type queues struct {
	mu     sync.Mutex
	m      map[string]*queue
	closed bool
}

// Queue implements backend.Queues. The memory store has one group per queue
// and ignores group.
func (s *Store) Queue(_ context.Context, name, _ string, capacity int) (backend.Queue, error) {
	qs := &s.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.closed {
		return nil, backend.ErrClosed
	}
	q := qs.m[name]
	if q == nil {
		if capacity <= 0 {
			return nil, backend.ErrNoQueue
		}
		if qs.m == nil {
			qs.m = map[string]*queue{}
		}
		q = &queue{capacity: capacity, ready: make(chan struct{}), entries: map[string]*queueEntry{}, dedupWindow: backend.DedupWindow,
			dedup: map[string]string{}, members: map[string]bool{}}
		qs.m[name] = q
	}
	return q, nil
}

// QueuesShared implements backend.Queues: the queues live in this process.
func (s *Store) QueuesShared() bool { return false }

// QueueWarning implements backend.Queues: nothing evicts entries here.
func (s *Store) QueueWarning(context.Context) string { return "" }

// closeQueues releases the queues: their operations fail with
// backend.ErrClosed from now on.
func (s *Store) closeQueues() {
	qs := &s.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.closed = true
	for _, q := range qs.m {
		q.mu.Lock()
		q.closed = true
		close(q.ready)
		q.mu.Unlock()
	}
	qs.m = nil
}

// queue is one queue.
type queue struct {
	mu      sync.Mutex
	closed  bool
	ready   chan struct{} // closed and replaced when an entry is added
	lastMs  int64
	seq     int64
	entries map[string]*queueEntry
	unread  []string // ids not yet delivered, oldest first
	dedup   map[string]string
	handled map[string]handledID // dedup id → the entry handled with it
	forget  []handledAt          // handled dedup ids, in the order of their acks
	// dedupWindow is how long a handled dedup id is remembered:
	// backend.DedupWindow, shorter in tests.
	dedupWindow time.Duration
	dead        []backend.DeadLetter
	members     map[string]bool

	admitted, delivered, acked int64
	capacity                   int                      // the queue's definition
	deadSeq                    int64                    // the last dead letter's number
	left                       [drainSeconds + 1]second // entries that left, per second
}

type queueEntry struct {
	id, dedup   string
	fields      []byte
	deliveries  int64
	owner       string
	deliveredAt time.Time
	lastErr     string
}

// A handledID is a dedup id remembered after its entry was handled.
type handledID struct {
	id    string
	sum   [sha256.Size]byte // of the entry's fields
	until time.Time
}

// handledAt is a dedup id handled, and when it is forgotten.
type handledAt struct {
	dedup string
	until time.Time
}

// drainSeconds is the span the drain rate looks back on.
const drainSeconds = 10

// second counts the entries that left in one Unix second.
type second struct{ unix, n int64 }

// lock locks q, or reports that its store was closed.
func (q *queue) lock() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return backend.ErrClosed
	}
	return nil
}

func (q *queue) Add(_ context.Context, dedup string, fields []byte) (backend.Added, error) {
	if err := q.lock(); err != nil {
		return backend.Added{}, err
	}
	defer q.mu.Unlock()
	return q.admit(dedup, fields), nil
}

// admit admits an entry as Add does; q.mu held.
func (q *queue) admit(dedup string, fields []byte) backend.Added {
	n := int64(len(q.entries))
	if dedup != "" {
		if id, ok := q.dedup[dedup]; ok {
			if e := q.entries[id]; e != nil && !bytes.Equal(e.fields, fields) {
				return backend.Added{Outcome: backend.Conflict, ID: id, Length: n}
			}
			return backend.Added{Outcome: backend.Duplicate, ID: id, Length: n}
		}
		if h, ok := q.handled[dedup]; ok && time.Now().Before(h.until) {
			if h.sum != sha256.Sum256(fields) {
				return backend.Added{Outcome: backend.Conflict, ID: h.id, Length: n}
			}
			return backend.Added{Outcome: backend.Duplicate, ID: h.id, Length: n}
		}
	}
	if n >= int64(q.capacity) {
		return backend.Added{Outcome: backend.Full, Length: n, DrainRate: q.rate(time.Now())}
	}
	ms := time.Now().UnixMilli()
	if ms <= q.lastMs {
		q.seq++
	} else {
		q.lastMs, q.seq = ms, 0
	}
	id := fmt.Sprintf("%d-%d", q.lastMs, q.seq)
	q.entries[id] = &queueEntry{id: id, dedup: dedup, fields: bytes.Clone(fields)}
	q.unread = append(q.unread, id)
	if dedup != "" {
		q.dedup[dedup] = id
	}
	q.admitted++
	close(q.ready)
	q.ready = make(chan struct{})
	return backend.Added{Outcome: backend.New, ID: id, Length: n + 1}
}

func (q *queue) Capacity(context.Context) (int, error) {
	if err := q.lock(); err != nil {
		return 0, err
	}
	defer q.mu.Unlock()
	return q.capacity, nil
}

func (q *queue) Define(_ context.Context, capacity int) error {
	if err := q.lock(); err != nil {
		return err
	}
	defer q.mu.Unlock()
	q.capacity = capacity
	return nil
}

func (q *queue) Requeue(_ context.Context, deadID string) (backend.Added, bool, error) {
	if err := q.lock(); err != nil {
		return backend.Added{}, false, err
	}
	defer q.mu.Unlock()
	i := q.deadIndex(deadID)
	if i < 0 {
		return backend.Added{}, false, nil
	}
	d := q.dead[i]
	a := q.admit(d.Dedup, d.Fields)
	if a.Outcome == backend.New {
		q.dead = append(q.dead[:i], q.dead[i+1:]...)
	}
	return a, true, nil
}

func (q *queue) Drop(_ context.Context, deadID string) (bool, error) {
	if err := q.lock(); err != nil {
		return false, err
	}
	defer q.mu.Unlock()
	i := q.deadIndex(deadID)
	if i >= 0 {
		q.dead = append(q.dead[:i], q.dead[i+1:]...)
	}
	return i >= 0, nil
}

// deadIndex returns the index of the dead letter deadID, or -1; q.mu held.
func (q *queue) deadIndex(deadID string) int {
	for i := range q.dead {
		if q.dead[i].DeadID == deadID {
			return i
		}
	}
	return -1
}

// rate is entries/s that left in the last drainSeconds full seconds and
// this one; q.mu held.
func (q *queue) rate(now time.Time) float64 {
	var n int64
	for _, c := range q.left {
		if now.Unix()-c.unix <= drainSeconds {
			n += c.n
		}
	}
	return float64(n) / drainSeconds
}

func (q *queue) deliver(e *queueEntry, consumer string, now time.Time) backend.Entry {
	e.deliveries++
	e.owner, e.deliveredAt = consumer, now
	q.delivered++
	return backend.Entry{ID: e.id, Fields: e.fields, Dedup: e.dedup, Deliveries: e.deliveries}
}

func (q *queue) Read(ctx context.Context, consumer string, count int, block time.Duration) ([]backend.Entry, error) {
	timer := time.NewTimer(block)
	defer timer.Stop()
	for {
		if err := q.lock(); err != nil {
			return nil, err
		}
		q.members[consumer] = true
		if len(q.unread) > 0 {
			var out []backend.Entry
			now := time.Now()
			for len(q.unread) > 0 && len(out) < count {
				e := q.entries[q.unread[0]]
				q.unread = q.unread[1:]
				out = append(out, q.deliver(e, consumer, now))
			}
			q.mu.Unlock()
			return out, nil
		}
		ready := q.ready
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, nil
		case <-ready:
		}
	}
}

func (q *queue) Claim(_ context.Context, consumer string, minIdle time.Duration, _ string, count int) (string, []backend.Entry, error) {
	if err := q.lock(); err != nil {
		return "", nil, err
	}
	defer q.mu.Unlock()
	q.members[consumer] = true
	now := time.Now()
	var out []backend.Entry
	for _, e := range q.entries {
		if e.owner != "" && now.Sub(e.deliveredAt) >= minIdle {
			if len(out) == count {
				return "more", out, nil // the next call looks again
			}
			out = append(out, q.deliver(e, consumer, now))
		}
	}
	return "0-0", out, nil
}

func (q *queue) Fail(_ context.Context, id, msg string) error {
	if err := q.lock(); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if e := q.entries[id]; e != nil {
		e.lastErr = msg
	}
	return nil
}

func (q *queue) LastError(_ context.Context, id string) (string, error) {
	if err := q.lock(); err != nil {
		return "", err
	}
	defer q.mu.Unlock()
	if e := q.entries[id]; e != nil {
		return e.lastErr, nil
	}
	return "", nil
}

func (q *queue) Ack(_ context.Context, id string, dead bool) (bool, error) {
	if err := q.lock(); err != nil {
		return false, err
	}
	defer q.mu.Unlock()
	e := q.entries[id]
	if e == nil || e.owner == "" {
		return false, nil
	}
	delete(q.entries, id)
	now := time.Now()
	q.forgetHandled(now)
	if e.dedup != "" && q.dedup[e.dedup] == id {
		delete(q.dedup, e.dedup)
		if !dead {
			if q.handled == nil {
				q.handled = map[string]handledID{}
			}
			until := now.Add(q.dedupWindow)
			q.handled[e.dedup] = handledID{id, sha256.Sum256(e.fields), until}
			q.forget = append(q.forget, handledAt{e.dedup, until})
		}
	}
	if !dead {
		q.acked++
	}
	sec := time.Now().Unix()
	c := &q.left[sec%int64(len(q.left))]
	if c.unix != sec {
		c.unix, c.n = sec, 0
	}
	c.n++
	return true, nil
}

// forgetHandled forgets the handled dedup ids whose window has ended by
// now; q.mu held.
func (q *queue) forgetHandled(now time.Time) {
	n := 0
	for _, f := range q.forget {
		if now.Before(f.until) {
			break
		}
		if q.handled[f.dedup].until.Equal(f.until) {
			delete(q.handled, f.dedup)
		}
		n++
	}
	if n > 0 {
		q.forget = slices.Delete(q.forget, 0, n)
	}
}

func (q *queue) AckAll(ctx context.Context, ids []string, done []bool) error {
	for i, id := range ids {
		var err error
		if done[i], err = q.Ack(ctx, id, false); err != nil {
			return err
		}
	}
	return nil
}

func (q *queue) DeadLetter(_ context.Context, e backend.Entry, msg string) error {
	if err := q.lock(); err != nil {
		return err
	}
	defer q.mu.Unlock()
	q.deadSeq++
	q.dead = append(q.dead, backend.DeadLetter{Entry: e, DeadID: fmt.Sprintf("%d-%d", time.Now().UnixMilli(), q.deadSeq), Error: msg})
	return nil
}

func (q *queue) DeadLetters(_ context.Context, count int) ([]backend.DeadLetter, error) {
	if err := q.lock(); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	return append([]backend.DeadLetter(nil), q.dead[:min(count, len(q.dead))]...), nil
}

func (q *queue) Stats(context.Context) (backend.Stats, error) {
	if err := q.lock(); err != nil {
		return backend.Stats{}, err
	}
	defer q.mu.Unlock()
	s := backend.Stats{Length: int64(len(q.entries)), Consumers: int64(len(q.members)), DeadLetters: int64(len(q.dead)),
		Admitted: q.admitted, Delivered: q.delivered, Acked: q.acked, DrainRate: q.rate(time.Now()), Capacity: q.capacity}
	s.Pending = s.Length - int64(len(q.unread))
	return s, nil
}

func (q *queue) Leave(_ context.Context, consumer string) error {
	if err := q.lock(); err != nil {
		return err
	}
	defer q.mu.Unlock()
	for _, e := range q.entries {
		if e.owner == consumer {
			return nil
		}
	}
	delete(q.members, consumer)
	return nil
}
