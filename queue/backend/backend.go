package backend

import (
	"context"
	"errors"
	"time"
)

// Queues is a store that keeps admission queues: bounded queues whose
// entries leave only when a worker handled them (package queue is their
// API). The Redis store keeps them in Redis Streams, shared by every
// process on the same Redis; the memory store keeps them in process. A
// store's queues belong to it: its Close releases them.
type Queues interface {
	// Queue returns the insides of the queue name with the consumer group
	// group. A queue's capacity is its definition: with capacity > 0, a
	// queue that has none yet (a new one) is defined with it and created;
	// a queue that has one keeps it (Queue.Define changes it). With
	// capacity 0 the queue must have been defined: else ErrNoQueue, and
	// nothing is created. An empty group creates no consumer group (the
	// handle then only defines and admits). Every call with the same name
	// reaches the same queue.
	Queue(ctx context.Context, name, group string, capacity int) (Queue, error)
	// QueuesShared reports whether the store's queues are shared between
	// processes (Redis), or live in this one (the memory store).
	QueuesShared() bool
	// QueueWarning returns a warning about a setting of the store under
	// which it may lose queued entries (a Redis that evicts keys), or "".
	QueueWarning(ctx context.Context) string
}

// DedupWindow is how long a handled entry's dedup id is remembered after
// its ack: an Add with that id within it answers the handled entry
// (Duplicate, or Conflict for other fields) and adds nothing, so that a
// producer's retry of an Add whose answer it lost (a timeout, a 503) never
// runs the work twice. A queued entry's id is remembered while it is
// queued; a dead-lettered entry's is forgotten, so that it can be
// requeued. Each remembered id costs its store about its length plus
// 100 bytes.
const DedupWindow = time.Hour

// ErrClosed is the error of an operation on a queue of a closed store.
var ErrClosed = errors.New("store: closed")

// ErrNoQueue is the error of Queues.Queue for a queue never defined.
var ErrNoQueue = errors.New("no such queue")

// A Queue is one queue's insides in a store: the operations package queue
// builds admission, delivery, claims, acks and dead letters on. Entries'
// fields are opaque bytes (package queue's JSON). Every operation is
// atomic in the store.
type Queue interface {
	// Add admits an entry of fields unless the queue holds its capacity.
	// A non-empty dedup id held by a queued entry, or by one handled
	// within DedupWindow, answers that entry (Duplicate when its fields
	// are the same, Conflict when not) and adds nothing.
	Add(ctx context.Context, dedup string, fields []byte) (Added, error)
	// Capacity returns the queue's capacity, its definition.
	Capacity(ctx context.Context) (int, error)
	// Define sets the queue's capacity; entries beyond a smaller one stay
	// and are handled.
	Define(ctx context.Context, capacity int) error
	// Read hands up to count entries never delivered to consumer, waiting
	// up to block for one.
	Read(ctx context.Context, consumer string, count int, block time.Duration) ([]Entry, error)
	// Claim hands consumer up to count entries delivered to a consumer at
	// least minIdle ago and not acked, looking from cursor on ("0-0"
	// first); next is "0-0" when it looked at every entry.
	Claim(ctx context.Context, consumer string, minIdle time.Duration, cursor string, count int) (next string, es []Entry, err error)
	// Fail records a delivery's error for an entry still queued.
	Fail(ctx context.Context, id, msg string) error
	// LastError returns the error recorded for an entry ("" for none).
	LastError(ctx context.Context, id string) (string, error)
	// Ack removes a delivered entry, counting it as handled (its dedup id
	// remembered for DedupWindow), or as dead (dead lettered, its dedup id
	// forgotten); false when it had been removed already.
	Ack(ctx context.Context, id string, dead bool) (bool, error)
	// AckAll acks handled entries at once: done[i] is Ack's answer for
	// ids[i].
	AckAll(ctx context.Context, ids []string, done []bool) error
	// DeadLetter appends e, with its last error, to the dead-letter list.
	DeadLetter(ctx context.Context, e Entry, msg string) error
	// DeadLetters returns up to count of the oldest dead letters.
	DeadLetters(ctx context.Context, count int) ([]DeadLetter, error)
	// Requeue moves the dead letter deadID back into the queue as a new
	// entry, with its fields and dedup id, as Add admits it; the dead
	// letter goes only if the entry was added. found is false when there
	// is no such dead letter.
	Requeue(ctx context.Context, deadID string) (a Added, found bool, err error)
	// Drop removes the dead letter deadID; false when there is none.
	Drop(ctx context.Context, deadID string) (bool, error)
	// Stats describes the queue.
	Stats(ctx context.Context) (Stats, error)
	// Leave forgets consumer, unless it holds entries.
	Leave(ctx context.Context, consumer string) error
}

// Entry is an entry as a store keeps it.
type Entry struct {
	// ID is unique in its queue and grows with admission
	// ("milliseconds-sequence", as a Redis stream id).
	ID string
	// Fields are the entry's fields, as its producer encoded them.
	Fields []byte
	// Dedup is the dedup id it was added with ("" for none).
	Dedup string
	// Deliveries counts its deliveries, this one included.
	Deliveries int64
}

// Outcome is what an Add did.
type Outcome int

// The outcomes of an Add.
const (
	// New: the entry was added.
	New Outcome = iota
	// Duplicate: an entry with the same dedup id and fields is
	// queued (Added.ID is that entry's); nothing was added.
	Duplicate
	// Conflict: an entry with the same dedup id and other fields is
	// queued; nothing was added.
	Conflict
	// Full: the queue held its capacity; nothing was added.
	Full
)

// Added is the answer of an Add.
type Added struct {
	Outcome Outcome
	// ID is the entry's id, or the queued entry's for a duplicate or a
	// conflict ("" when full).
	ID string
	// Length is the queue's length after the call.
	Length int64
	// DrainRate is the entries that left per second lately, when full.
	DrainRate float64
}

// DeadLetter is an entry on the dead-letter list.
type DeadLetter struct {
	Entry
	// DeadID is its id on the dead-letter list, which Requeue and Drop
	// take (its entry's ID was the queue's).
	DeadID string
	// Error is its handler's last error.
	Error string
}

// Stats are a queue's numbers.
type Stats struct {
	// Capacity is the queue's capacity, its definition.
	Capacity int
	// Length counts the entries waiting and being handled; Pending those
	// delivered and not acked.
	Length, Pending int64
	// Consumers counts the workers known to the group; DeadLetters the
	// entries on the dead-letter list.
	Consumers, DeadLetters int64
	// Admitted, Delivered (redeliveries too) and Acked (handled) count
	// since the queue was created.
	Admitted, Delivered, Acked int64
	// DrainRate is the entries that left per second, over the last 10 to
	// 20 seconds.
	DrainRate float64
}
