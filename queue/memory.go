package queue

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

// memQueue is the in-process twin of a Redis queue: the same admission,
// delivery, claim, ack and dead-letter rules, in one process.
type memQueue struct {
	mu      sync.Mutex
	ready   chan struct{} // closed and replaced when an entry is added
	lastMs  int64
	seq     int64
	entries map[string]*memEntry
	unread  []string // ids not yet delivered, oldest first
	dedup   map[string]string
	dead    []DeadLetter
	members map[string]bool

	admitted, delivered, acked int64
	capacity                   int                      // of the last admission
	left                       [drainSeconds + 1]second // entries that left, per second
}

type memEntry struct {
	id, dedup   string
	fields      []byte
	deliveries  int64
	owner       string
	deliveredAt time.Time
	lastErr     string
}

func newMemQueue() *memQueue {
	return &memQueue{ready: make(chan struct{}), entries: map[string]*memEntry{},
		dedup: map[string]string{}, members: map[string]bool{}}
}

// drainSeconds is the span the memory twin's drain rate looks back on.
const drainSeconds = 10

// second counts the entries that left in one Unix second.
type second struct{ unix, n int64 }

func (m *memQueue) add(_ context.Context, capacity int, dedup string, fields []byte) (Added, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(len(m.entries))
	if dedup != "" {
		if id, ok := m.dedup[dedup]; ok {
			if e := m.entries[id]; e != nil && !bytes.Equal(e.fields, fields) {
				return Added{ID: id, Length: n}, ErrDedupConflict
			}
			return Added{ID: id, Duplicate: true, Length: n}, nil
		}
	}
	if n >= int64(capacity) {
		return Added{Length: n}, &FullError{Length: n, Wait: estimate(n, int64(capacity), m.rate(time.Now()))}
	}
	ms := time.Now().UnixMilli()
	if ms <= m.lastMs {
		m.seq++
	} else {
		m.lastMs, m.seq = ms, 0
	}
	id := fmt.Sprintf("%d-%d", m.lastMs, m.seq)
	m.entries[id] = &memEntry{id: id, dedup: dedup, fields: fields}
	m.unread = append(m.unread, id)
	if dedup != "" {
		m.dedup[dedup] = id
	}
	m.admitted++
	m.capacity = capacity
	close(m.ready)
	m.ready = make(chan struct{})
	return Added{ID: id, Length: n + 1}, nil
}

// rate is entries/s that left in the last drainSeconds full seconds and
// this one; m.mu held.
func (m *memQueue) rate(now time.Time) float64 {
	var n int64
	for _, c := range m.left {
		if now.Unix()-c.unix <= drainSeconds {
			n += c.n
		}
	}
	return float64(n) / drainSeconds
}

func (m *memQueue) deliver(e *memEntry, consumer string, now time.Time) (Entry, error) {
	e.deliveries++
	e.owner, e.deliveredAt = consumer, now
	m.delivered++
	f, err := decodeFields(e.fields)
	return Entry{ID: e.id, Fields: f, Dedup: e.dedup, Deliveries: e.deliveries}, err
}

func (m *memQueue) read(ctx context.Context, consumer string, count int, block time.Duration) ([]Entry, error) {
	timer := time.NewTimer(block)
	defer timer.Stop()
	for {
		m.mu.Lock()
		m.members[consumer] = true
		if len(m.unread) > 0 {
			var out []Entry
			now := time.Now()
			for len(m.unread) > 0 && len(out) < count {
				e := m.entries[m.unread[0]]
				m.unread = m.unread[1:]
				x, err := m.deliver(e, consumer, now)
				if err != nil {
					m.mu.Unlock()
					return nil, err
				}
				out = append(out, x)
			}
			m.mu.Unlock()
			return out, nil
		}
		ready := m.ready
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, nil
		case <-ready:
		}
	}
}

func (m *memQueue) claim(_ context.Context, consumer string, minIdle time.Duration, _ string, count int) (string, []Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.members[consumer] = true
	now := time.Now()
	var out []Entry
	for _, e := range m.entries {
		if e.owner != "" && now.Sub(e.deliveredAt) >= minIdle {
			if len(out) == count {
				return "more", out, nil // the next call looks again
			}
			x, err := m.deliver(e, consumer, now)
			if err != nil {
				return "", nil, err
			}
			out = append(out, x)
		}
	}
	return "0-0", out, nil
}

func (m *memQueue) fail(_ context.Context, id, msg string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[id]; e != nil {
		e.lastErr = truncate(msg)
	}
	return nil
}

func (m *memQueue) lastError(_ context.Context, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[id]; e != nil {
		return e.lastErr, nil
	}
	return "", nil
}

func (m *memQueue) ack(_ context.Context, id string, dead bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[id]
	if e == nil || e.owner == "" {
		return false, nil
	}
	delete(m.entries, id)
	if e.dedup != "" && m.dedup[e.dedup] == id {
		delete(m.dedup, e.dedup)
	}
	if !dead {
		m.acked++
	}
	sec := time.Now().Unix()
	c := &m.left[sec%int64(len(m.left))]
	if c.unix != sec {
		c.unix, c.n = sec, 0
	}
	c.n++
	return true, nil
}

func (m *memQueue) ackAll(ctx context.Context, ids []string, done []bool) error {
	for i, id := range ids {
		done[i], _ = m.ack(ctx, id, false)
	}
	return nil
}

func (m *memQueue) deadLetter(_ context.Context, e Entry, msg string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = append(m.dead, DeadLetter{Entry: e, Error: truncate(msg)})
	return nil
}

func (m *memQueue) deadLetters(_ context.Context, count int) ([]DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]DeadLetter(nil), m.dead[:min(count, len(m.dead))]...), nil
}

func (m *memQueue) stats(context.Context) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Length: int64(len(m.entries)), Consumers: int64(len(m.members)), DeadLetters: int64(len(m.dead)),
		Admitted: m.admitted, Delivered: m.delivered, Acked: m.acked, DrainRate: m.rate(time.Now()), Capacity: m.capacity}
	s.Pending = s.Length - int64(len(m.unread))
	return s, nil
}

func (m *memQueue) leave(_ context.Context, consumer string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.owner == consumer {
			return nil
		}
	}
	delete(m.members, consumer)
	return nil
}
