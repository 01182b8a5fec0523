package memory

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

var _ store.ConsumerLog = (*Store)(nil)

// Bounds of the consumers lists, which callers fill: at most
// maxConsumerLists keys have a list, and the lists hold at most
// defaultConsumerBytes of entries and keys. Past either bound, expired
// lists are swept to make room, and what still does not fit is dropped
// (and counted: PushConsumers' error).
const (
	maxConsumerLists     = 100_000
	defaultConsumerBytes = 32 << 20
	listOverhead         = 96 // a list's map entry and ring, roughly
)

// consumerLists keeps a ring of entries per key.
type consumerLists struct {
	mu     sync.Mutex
	lists  map[string]*ring
	bytes  int // entries, keys and overheads held
	budget int
}

type ring struct {
	entries [][]byte // oldest first once full: next is the place to write
	next    int
	n       int
	expires time.Time
	bytes   int
}

// PushConsumers implements store.ConsumerLog. Tags are ignored. Entries
// that do not fit the bounds are dropped, and the error says how many.
func (s *Store) PushConsumers(_ context.Context, entries []store.Consumed, max int, ttl time.Duration) error {
	if max <= 0 {
		return nil
	}
	c := &s.consumers
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = map[string]*ring{}
	}
	if c.budget <= 0 {
		c.budget = defaultConsumerBytes
	}
	swept, dropped := false, 0
	for _, it := range entries {
		l := c.lists[it.Key]
		if l != nil && (now.After(l.expires) || len(l.entries) != max) {
			c.remove(it.Key, l)
			l = nil
		}
		size := len(it.Entry)
		if l == nil {
			size += len(it.Key) + listOverhead
		} else if l.n == max {
			size -= len(l.entries[l.next]) // the oldest goes
		}
		if (l == nil && len(c.lists) >= maxConsumerLists || c.bytes+size > c.budget) && !swept {
			c.sweep(now)
			swept = true
		}
		if l == nil && len(c.lists) >= maxConsumerLists || c.bytes+size > c.budget {
			dropped++
			continue
		}
		if l == nil {
			l = &ring{entries: make([][]byte, max)}
			c.lists[strings.Clone(it.Key)] = l
		}
		l.bytes += size
		c.bytes += size
		l.entries[l.next] = it.Entry
		l.next = (l.next + 1) % max
		l.n = min(l.n+1, max)
		l.expires = now.Add(ttl)
	}
	if dropped > 0 {
		return &store.DroppedError{Dropped: dropped, Reason: "the consumers lists are full"}
	}
	return nil
}

func (c *consumerLists) remove(key string, l *ring) {
	c.bytes -= l.bytes
	delete(c.lists, key)
}

func (c *consumerLists) sweep(now time.Time) {
	for k, l := range c.lists {
		if now.After(l.expires) {
			c.remove(k, l)
		}
	}
}

// Consumers implements store.ConsumerLog.
func (s *Store) Consumers(_ context.Context, key, _ string) ([][]byte, error) {
	c := &s.consumers
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lists[key]
	if l == nil || time.Now().After(l.expires) {
		return [][]byte{}, nil
	}
	out := make([][]byte, 0, l.n)
	for i := 1; i <= l.n; i++ {
		out = append(out, l.entries[(l.next-i+len(l.entries))%len(l.entries)])
	}
	return out, nil
}

// ResetConsumers implements store.ConsumerLog.
func (s *Store) ResetConsumers(_ context.Context, reqs []store.Request) error {
	c := &s.consumers
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		if l := c.lists[r.Key]; l != nil {
			c.remove(r.Key, l)
		}
	}
	return nil
}
