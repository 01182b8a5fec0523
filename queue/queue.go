// Package queue is a bounded admission queue drained by workers at their
// own pace: a leaky bucket coupled to real processing.
//
// Add admits an entry while the queue holds fewer than Options.Capacity
// entries, and otherwise refuses it with a *FullError that carries the
// queue's length and a wait estimated from the observed drain rate. An
// entry leaves the queue only when a worker has handled it (its handler
// returned nil) or has moved it to the dead-letter list, so the length
// counts entries waiting and entries being handled, and nothing accepted
// is lost.
//
// A queue lives in a store that keeps queues (backend.Queues). On Redis a
// queue is a stream with one consumer group; admission is one Lua script
// (XLEN, XADD), never trimmed with MAXLEN. Workers in any number of
// processes read with XREADGROUP, ack and delete an entry only after its
// handler succeeded, and claim the entries a dead or stuck worker held
// longer than the visibility timeout with XAUTOCLAIM. Delivery is at
// least once: a handler gets the entry's id to deduplicate. On the memory
// store the queue lives in process, with the same API and meaning, shared
// by every Queue opened on that store with the same name, and released by
// the store's Close.
package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/queue/backend"
	"github.com/sluicehq/sluice/store"
)

// Bounds on what a caller controls.
const (
	// MaxNameBytes bounds a queue's name.
	MaxNameBytes = 200
	// MaxEntryBytes bounds an entry's fields, encoded as JSON.
	MaxEntryBytes = 64 << 10
	// MaxDedupBytes bounds a deduplication id.
	MaxDedupBytes = 200
	// MaxDeadLetters bounds the dead letters one DeadLetters call returns.
	MaxDeadLetters = 10_000
)

// maxPerRead bounds WorkerOptions.PerRead, the entries one read takes.
const maxPerRead = 1000

// Options configures a Queue.
type Options struct {
	// Capacity is the most entries the queue holds; Add refuses beyond
	// it. It belongs to the queue's definition, in the store: Open defines
	// a new queue with it, and refuses a handle that asks an existing
	// queue for another (ErrCapacity; Define changes it). Zero opens a
	// queue that exists, with its capacity, and refuses a name never
	// defined (ErrUnknownQueue), such as a misspelled one.
	Capacity int
	// Group names the consumer group the workers share on Redis. Default
	// "workers". The memory twin has one group and ignores it.
	Group string
}

// Entry is one admitted entry.
type Entry struct {
	// ID is the entry's id, unique in its queue and increasing with
	// admission (a Redis stream id, "milliseconds-sequence").
	ID string
	// Fields are what the producer added.
	Fields map[string]string
	// Dedup is the deduplication id the entry was added with ("" for
	// none). An id is free again once its entry was handled, so a producer
	// that retries after that adds the entry again: a handler that must
	// act once per id checks it here.
	Dedup string
	// Deliveries counts how often the entry was handed to a handler,
	// this time included.
	Deliveries int64
}

// Added is the answer to a successful Add.
type Added struct {
	// ID is the entry's id.
	ID string
	// Duplicate reports that an entry with the same deduplication id and
	// fields is queued, or was handled within backend.DedupWindow: ID is
	// that entry's and nothing was added.
	Duplicate bool
	// Length is the queue's length after the call.
	Length int64
}

// FullError is the error of an Add refused because the queue was full.
type FullError struct {
	// Length is the queue's length, at least its capacity.
	Length int64
	// Wait estimates when a place frees: (Length - capacity + 1) over the
	// drain rate observed in the last 10 to 20 seconds; 0 when nothing
	// was drained lately (unknown).
	Wait time.Duration
}

// Error implements error.
func (e *FullError) Error() string {
	if e.Wait <= 0 {
		return fmt.Sprintf("queue full: length %d, wait unknown (nothing drained lately)", e.Length)
	}
	return fmt.Sprintf("queue full: length %d, estimated wait %v", e.Length, e.Wait)
}

// ErrBadEntry matches the errors of entries, dedup ids and names beyond
// their bounds.
var ErrBadEntry = errors.New("bad entry")

// ErrDedupConflict is the error of an Add whose dedup id is held by a
// queued entry with other fields: nothing was added (the IETF
// Idempotency-Key draft's 422).
var ErrDedupConflict = errors.New("the dedup id was added with other fields")

// ErrFull matches every *FullError with errors.Is.
var ErrFull = errors.New("queue full")

// Is reports whether target is ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Stats describes a queue.
type Stats struct {
	Name string `json:"name"`
	// Capacity is the queue's capacity, its definition.
	Capacity int `json:"capacity"`
	// Length counts the entries in the queue: waiting and being handled.
	Length int64 `json:"length"`
	// Pending counts the entries delivered to a worker and not yet acked.
	Pending int64 `json:"pending"`
	// Consumers counts the workers known to the group.
	Consumers int64 `json:"consumers"`
	// DeadLetters counts the entries in the dead-letter list.
	DeadLetters int64 `json:"dead_letters"`
	// Admitted, Delivered and Acked count since the queue was created;
	// Delivered counts redeliveries too, Acked counts handled entries
	// (dead letters not included).
	Admitted  int64 `json:"admitted"`
	Delivered int64 `json:"delivered"`
	Acked     int64 `json:"acked"`
	// DrainRate is entries leaving the queue per second, over the last 10
	// to 20 seconds.
	DrainRate float64 `json:"drain_rate"`
}

// DeadLetter is an entry moved to the dead-letter list.
type DeadLetter struct {
	Entry
	// DeadID is its id on the dead-letter list: Requeue and Drop take it
	// (Entry.ID was its id in the queue).
	DeadID string
	// Error is the last error of its handler.
	Error string
}

// Queue is a handle on a named queue in a store. It is safe for
// concurrent use.
type Queue struct {
	name  string
	opts  Options
	st    store.Store
	b     backend.Queue
	hooks hooks
	// closed is closed by Close.
	closed    chan struct{}
	closeOnce sync.Once
}

// hooks inject crashes in tests.
type hooks struct {
	// afterRead runs when a worker got entries, before handling them.
	afterRead func(es []Entry) error
	// afterDeadLetter runs between a dead letter's write and its ack.
	afterDeadLetter func(e Entry) error
}

// Open returns the queue name in st. A new queue is defined with
// opts.Capacity and created (on Redis, its stream and consumer group); an
// existing one keeps its capacity (see Options.Capacity).
func Open(ctx context.Context, st store.Store, name string, opts Options) (*Queue, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("queue %q: capacity %d is negative", name, opts.Capacity)
	}
	if opts.Group == "" {
		opts.Group = "workers"
	}
	qs, ok := st.(backend.Queues)
	if !ok {
		return nil, fmt.Errorf("queue %q: %T keeps no queues (backend.Queues)", name, st)
	}
	b, err := qs.Queue(ctx, name, opts.Group, opts.Capacity)
	if errors.Is(err, backend.ErrNoQueue) {
		return nil, fmt.Errorf("queue %q: %w: give a capacity to define it", name, ErrUnknownQueue)
	}
	if err != nil {
		return nil, fmt.Errorf("queue %q: %w", name, err)
	}
	defined, err := b.Capacity(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue %q: %w", name, err)
	}
	if opts.Capacity > 0 && opts.Capacity != defined {
		return nil, fmt.Errorf("queue %q: %w: it holds %d, not %d (the capacity belongs to the queue's definition: change it with Define)", name, ErrCapacity, defined, opts.Capacity)
	}
	opts.Capacity = defined
	return &Queue{name: name, opts: opts, st: st, b: b, closed: make(chan struct{})}, nil
}

// Define sets the capacity of the queue name in st, defining it when it
// is new. Entries beyond a smaller capacity stay, and are handled; Add
// refuses until the queue holds fewer. Handles opened before go on with
// the new capacity, which the store applies.
func Define(ctx context.Context, st store.Store, name string, capacity int) error {
	if capacity <= 0 {
		return fmt.Errorf("queue %q: capacity %d must be positive", name, capacity)
	}
	if err := checkName(name); err != nil {
		return err
	}
	qs, ok := st.(backend.Queues)
	if !ok {
		return fmt.Errorf("queue %q: %T keeps no queues (backend.Queues)", name, st)
	}
	b, err := qs.Queue(ctx, name, "", capacity) // no consumer group: Open makes its own
	if err == nil {
		err = b.Define(ctx, capacity)
	}
	if err != nil {
		return fmt.Errorf("queue %q: define: %w", name, err)
	}
	return nil
}

// ErrUnknownQueue is the error of Open for a queue never defined.
var ErrUnknownQueue = errors.New("no such queue")

// ErrCapacity is the error of Open for a capacity other than the queue's.
var ErrCapacity = errors.New("the queue has another capacity")

// ErrNoDeadLetter is the error of Requeue and Drop for an id that is on
// no dead letter.
var ErrNoDeadLetter = errors.New("no such dead letter")

// ErrClosed is the error of a call on a closed Queue.
var ErrClosed = errors.New("queue: closed")

// Close closes the handle: its later calls fail with ErrClosed, and its
// running Work calls finish the entries in hand and return. The queue and
// its entries stay in the store (the memory store's go when the store is
// closed).
func (q *Queue) Close() error {
	q.closeOnce.Do(func() { close(q.closed) })
	return nil
}

// isClosed reports whether Close was called.
func (q *Queue) isClosed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

// Shared reports whether queues in st are shared between processes (a
// Redis store), rather than living in this one.
func Shared(st store.Store) bool {
	qs, ok := st.(backend.Queues)
	return ok && qs.QueuesShared()
}

// EvictionWarning returns a warning when st may lose queued entries (a
// Redis whose maxmemory-policy evicts keys), and "" otherwise.
func EvictionWarning(ctx context.Context, st store.Store) string {
	if qs, ok := st.(backend.Queues); ok {
		return qs.QueueWarning(ctx)
	}
	return ""
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("queue: empty name")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("queue: name of %d bytes (at most %d)", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return errors.New("queue: name is not UTF-8")
	}
	return nil
}

// NewDedupID returns a fresh dedup id, 128 random bits, for a producer
// that has none of its own: with it, a retry after a failed Add cannot
// queue the entry twice.
func NewDedupID() string {
	var b [16]byte
	rand.Read(b[:])
	return "sluice-" + hex.EncodeToString(b[:])
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Capacity returns the queue's capacity when the handle was opened.
func (q *Queue) Capacity() int { return q.opts.Capacity }

// Add admits an entry with fields unless the queue is full (a
// *FullError, matching ErrFull). With a non-empty dedup id, an entry with
// the same id and fields that is queued, or was handled within
// backend.DedupWindow (an hour), is answered instead of adding another
// (Added.Duplicate), and one with other fields is an error
// (ErrDedupConflict); after that window, or once the entry was
// dead-lettered, the id may be added again. Fields may be empty (an entry whose arrival is the message);
// a field's name may not (ErrBadEntry).
//
// When Add fails for another reason (the store timed out), the entry may
// still have been added: retry with the same dedup id, which answers
// Duplicate if it was.
func (q *Queue) Add(ctx context.Context, fields map[string]string, dedup string) (Added, error) {
	if len(dedup) > MaxDedupBytes {
		return Added{}, fmt.Errorf("queue %q: %w: dedup id of %d bytes (at most %d)", q.name, ErrBadEntry, len(dedup), MaxDedupBytes)
	}
	enc, err := encodeFields(fields)
	if err != nil {
		return Added{}, fmt.Errorf("queue %q: %w: %w", q.name, ErrBadEntry, err)
	}
	if q.isClosed() {
		return Added{}, ErrClosed
	}
	a, err := q.b.Add(ctx, dedup, enc)
	if err != nil {
		return Added{}, fmt.Errorf("queue %q: add: %w", q.name, err)
	}
	return q.added(a)
}

// added is the answer of an Add (or a Requeue) as the store gave it.
func (q *Queue) added(a backend.Added) (Added, error) {
	switch a.Outcome {
	case backend.New:
		return Added{ID: a.ID, Length: a.Length}, nil
	case backend.Duplicate:
		return Added{ID: a.ID, Duplicate: true, Length: a.Length}, nil
	case backend.Conflict:
		return Added{ID: a.ID, Length: a.Length}, fmt.Errorf("queue %q: %w", q.name, ErrDedupConflict)
	}
	return Added{Length: a.Length}, &FullError{Length: a.Length, Wait: expectedWait(a.Length, int64(q.opts.Capacity), a.DrainRate)}
}

// Requeue moves the dead letter deadID (DeadLetter.DeadID) back into the
// queue as a new entry, with its fields and dedup id, as Add admits it: a
// *FullError when the queue is full, Duplicate when its dedup id is
// queued meanwhile. The dead letter goes only when the entry was added.
func (q *Queue) Requeue(ctx context.Context, deadID string) (Added, error) {
	if q.isClosed() {
		return Added{}, ErrClosed
	}
	a, found, err := q.b.Requeue(ctx, deadID)
	switch {
	case err != nil:
		return Added{}, fmt.Errorf("queue %q: requeue %s: %w", q.name, deadID, err)
	case !found:
		return Added{}, fmt.Errorf("queue %q: %w %s", q.name, ErrNoDeadLetter, deadID)
	}
	return q.added(a)
}

// Drop removes the dead letter deadID (DeadLetter.DeadID).
func (q *Queue) Drop(ctx context.Context, deadID string) error {
	if q.isClosed() {
		return ErrClosed
	}
	found, err := q.b.Drop(ctx, deadID)
	switch {
	case err != nil:
		return fmt.Errorf("queue %q: drop %s: %w", q.name, deadID, err)
	case !found:
		return fmt.Errorf("queue %q: %w %s", q.name, ErrNoDeadLetter, deadID)
	}
	return nil
}

// expectedWait is the wait until the queue holds fewer than capacity entries,
// at rate entries/s; 0 when the rate is unknown.
func expectedWait(length, capacity int64, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(length-capacity+1) / rate * float64(time.Second))
}

// Stats describes the queue.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	if q.isClosed() {
		return Stats{}, ErrClosed
	}
	s, err := q.b.Stats(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("queue %q: stats: %w", q.name, err)
	}
	return Stats{Name: q.name, Capacity: s.Capacity, Length: s.Length, Pending: s.Pending, Consumers: s.Consumers,
		DeadLetters: s.DeadLetters, Admitted: s.Admitted, Delivered: s.Delivered, Acked: s.Acked, DrainRate: s.DrainRate}, nil
}

// DeadLetters returns up to count (1 to MaxDeadLetters) of the oldest
// dead letters.
func (q *Queue) DeadLetters(ctx context.Context, count int) ([]DeadLetter, error) {
	if q.isClosed() {
		return nil, ErrClosed
	}
	if count < 1 || count > MaxDeadLetters {
		return nil, fmt.Errorf("queue %q: dead letters: count %d: want 1 to %d", q.name, count, MaxDeadLetters)
	}
	ds, err := q.b.DeadLetters(ctx, count)
	if err != nil {
		return nil, fmt.Errorf("queue %q: dead letters: %w", q.name, err)
	}
	out := make([]DeadLetter, len(ds))
	for i, d := range ds {
		e, err := entryOf(d.Entry)
		if err != nil {
			return nil, fmt.Errorf("queue %q: %w", q.name, err)
		}
		out[i] = DeadLetter{Entry: e, DeadID: d.DeadID, Error: d.Error}
	}
	return out, nil
}

// entryOf decodes an entry as the store keeps it.
func entryOf(e backend.Entry) (Entry, error) {
	f, err := decodeFields(e.Fields)
	if err != nil {
		return Entry{}, fmt.Errorf("entry %s: %w", e.ID, err)
	}
	return Entry{ID: e.ID, Fields: f, Dedup: e.Dedup, Deliveries: e.Deliveries}, nil
}

// raw is e as the store keeps it.
func raw(e Entry) (backend.Entry, error) {
	f, err := encodeFields(e.Fields)
	return backend.Entry{ID: e.ID, Fields: f, Dedup: e.Dedup, Deliveries: e.Deliveries}, err
}
