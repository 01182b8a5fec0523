package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/queue/backend"
)

// handler handles one entry (Work's h).
type handler = func(ctx context.Context, e Entry) error

// WorkerOptions configures Work.
type WorkerOptions struct {
	// Consumer names this worker in the group; default host-pid-counter.
	// Names must be unique among live workers.
	Consumer string
	// Rate, when positive, paces the whole group: at most Rate entries
	// per second are handled by all workers of the queue together,
	// counted by a GCRA limit in the queue's store. Zero runs as fast as
	// the handlers go.
	Rate float64
	// Visibility is how long an entry may stay with a worker before live
	// workers claim it (the worker died or is stuck); default 30s.
	Visibility time.Duration
	// MaxDeliveries is how often an entry is delivered before it goes to
	// the dead-letter list with its last error; default 5.
	MaxDeliveries int64
	// HandlerTimeout bounds each handler call: its context is cancelled
	// then, and the delivery counts as failed (recorded, and dead-lettered
	// after MaxDeliveries) whatever the handler returns, so that no entry
	// stays with a hung handler until another worker claims it and runs it
	// at the same time. It must be below Visibility; default 3/4 of it. A
	// handler must return when its context is done: Work waits for it.
	HandlerTimeout time.Duration
	// ShutdownTimeout, when positive, bounds how long the entry in hand
	// may still run once Work's context is done: then its handler's
	// context is cancelled and the entry is left pending, claimed by a
	// live worker after Visibility (not counted as failed). Zero lets it
	// run up to HandlerTimeout.
	ShutdownTimeout time.Duration
	// PerRead is how many entries one read takes, 1 to 1,000; default 1.
	// The entries of a read are handled one by one and those that
	// succeeded are acked together, in one round trip, after the last:
	// Visibility must cover a whole read, and a crash mid-read
	// redelivers the read.
	PerRead int
	// Log receives warnings; default slog.Default().
	Log *slog.Logger
}

// Counts are what one Work call did.
type Counts struct {
	// Handled counts entries whose handler succeeded and that this worker
	// acked; Duplicates counts entries handled successfully that another
	// worker had acked first (delivered twice).
	Handled, Duplicates int64
	// Failed counts handler errors; DeadLettered the entries this worker
	// moved to the dead-letter list; Claimed the entries it took over.
	Failed, DeadLettered, Claimed int64
}

var consumerSeq atomic.Int64

// Work handles the queue's entries with h until ctx is done, then
// finishes the entry in hand and returns its counts with nil. Entries
// are handled in this goroutine, one at a time. h returns nil when the
// entry is done (it is then acked and removed); any error leaves the
// entry to be delivered again after the visibility timeout, or
// dead-lettered once it was delivered MaxDeliveries times. Delivery is at
// least once: use e.ID to deduplicate. A store failure after a
// delivery (recording a failure, a dead letter, an ack) is logged and
// leaves the entry pending, to be claimed again; Work returns an error
// only when reading from the store fails for longer than a visibility
// timeout.
func (q *Queue) Work(ctx context.Context, h func(ctx context.Context, e Entry) error, o WorkerOptions) (Counts, error) {
	if q.isClosed() {
		return Counts{}, ErrClosed
	}
	w, err := q.newWorker(o)
	if err != nil {
		return Counts{}, err
	}
	// Close stops Work as the end of ctx does.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-q.closed:
			stop()
		case <-ctx.Done():
		}
	}()
	return w.run(ctx, h)
}

// read takes up to PerRead new entries, waiting up to block for one.
func (w *worker) read(ctx context.Context, block time.Duration) ([]Entry, error) {
	raws, err := w.q.b.Read(ctx, w.o.Consumer, w.o.PerRead, block)
	if err != nil {
		return nil, err
	}
	return entries(raws)
}

// entries decodes entries as the store keeps them.
func entries(raws []backend.Entry) ([]Entry, error) {
	es := make([]Entry, 0, len(raws))
	for _, r := range raws {
		e, err := entryOf(r)
		if err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

// truncate bounds a handler's error text at 4 KiB.
func truncate(msg string) string {
	const max = 4 << 10
	if len(msg) > max {
		return msg[:max]
	}
	return msg
}

type worker struct {
	q       *Queue
	o       WorkerOptions
	pace    *sluice.Limiter
	counts  Counts
	handled []string // ids of a read handled, to ack
	acked   []bool
	cursor  string // XAUTOCLAIM's, "0-0" at the start of a sweep
}

func (q *Queue) newWorker(o WorkerOptions) (*worker, error) {
	switch {
	case o.Visibility < 0 || o.HandlerTimeout < 0 || o.ShutdownTimeout < 0:
		return nil, fmt.Errorf("queue %q: a negative duration: visibility %v, handler timeout %v, shutdown timeout %v", q.name, o.Visibility, o.HandlerTimeout, o.ShutdownTimeout)
	case o.MaxDeliveries < 0:
		return nil, fmt.Errorf("queue %q: max deliveries %d is negative", q.name, o.MaxDeliveries)
	case o.PerRead < 0 || o.PerRead > maxPerRead:
		return nil, fmt.Errorf("queue %q: per read %d: want 1 to %d (0: 1)", q.name, o.PerRead, maxPerRead)
	case o.Rate < 0 || math.IsNaN(o.Rate):
		return nil, fmt.Errorf("queue %q: rate %v: want 0 or more", q.name, o.Rate)
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		o.Consumer = host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(consumerSeq.Add(1), 10)
	}
	if o.Visibility <= 0 {
		o.Visibility = 30 * time.Second
	}
	if o.MaxDeliveries <= 0 {
		o.MaxDeliveries = 5
	}
	if o.HandlerTimeout <= 0 {
		o.HandlerTimeout = o.Visibility * 3 / 4
	}
	if o.HandlerTimeout >= o.Visibility {
		return nil, fmt.Errorf("queue %q: handler timeout %v is not below the visibility timeout %v: a hung handler's entry would be claimed and run twice at once", q.name, o.HandlerTimeout, o.Visibility)
	}
	if o.PerRead <= 0 {
		o.PerRead = 1
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	w := &worker{q: q, o: o}
	if o.Rate > 0 {
		period := time.Duration(float64(time.Second) / o.Rate)
		if period <= 0 {
			return nil, fmt.Errorf("queue %q: rate %v is too high to pace", q.name, o.Rate)
		}
		l, err := sluice.NewLimiter(q.st, algo.GCRA{Count: 1, Period: period})
		if err != nil {
			return nil, fmt.Errorf("queue %q: pace: %w", q.name, err)
		}
		w.pace = l
	}
	return w, nil
}

// paceKey is the limiter key the workers of a queue share.
func (w *worker) paceKey() string { return sluice.Key("queue", w.q.name, "pace") }

func (w *worker) run(ctx context.Context, h handler) (Counts, error) {
	// The entry in hand is finished with a context that outlives ctx.
	work := context.WithoutCancel(ctx)
	var failingSince, swept time.Time
	sweeping := true
	w.cursor = "0-0"
	for ctx.Err() == nil {
		var es []Entry
		var err error
		// Sweep for stale entries every quarter of the visibility
		// timeout, a read per turn until the cursor is back at the start.
		if sweeping || time.Since(swept) >= w.o.Visibility/4 {
			es, sweeping, err = w.claimSome(ctx)
			if !sweeping {
				swept = time.Now()
			}
		}
		if err == nil && len(es) == 0 {
			block := min(w.o.Visibility/4, time.Second)
			es, err = w.read(ctx, block)
		}
		if c, ok := err.(crash); ok {
			return w.counts, c.err
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > w.o.Visibility {
				return w.counts, fmt.Errorf("queue %q: store failing since %v: %w", w.q.name, failingSince.Format(time.RFC3339), err)
			}
			w.o.Log.Warn("queue read failed", "queue", w.q.name, "err", err)
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		failingSince = time.Time{}
		if len(es) > 0 && w.q.hooks.afterRead != nil {
			if err := w.q.hooks.afterRead(es); err != nil {
				return w.counts, err
			}
		}
		ok := w.handled[:0]
		for i, e := range es {
			if i > 0 && ctx.Err() != nil {
				break // stopping: the rest stay pending, claimed later
			}
			done, err := w.handle(ctx, work, h, e)
			if c, ok := err.(crash); ok {
				return w.counts, c.err
			}
			if err != nil {
				// The entry stays pending and is claimed again later.
				w.o.Log.Warn("queue: store failed after a delivery", "queue", w.q.name, "entry", e.ID, "err", err)
			}
			if done {
				ok = append(ok, e.ID)
			}
		}
		w.handled = ok
		if err := w.ackAll(work, ok); err != nil {
			// Handled and not acked: delivered again later (a duplicate).
			w.o.Log.Warn("queue: ack failed", "queue", w.q.name, "err", err)
		}
	}
	if err := w.q.b.Leave(work, w.o.Consumer); err != nil {
		w.o.Log.Warn("queue: leaving the group failed", "queue", w.q.name, "err", err)
	}
	return w.counts, nil
}

// claimSome takes up to PerRead entries idle past the visibility timeout,
// from the worker's XAUTOCLAIM cursor on, dead-lettering those delivered
// too often; sweeping reports whether the cursor has more to look at.
// Taking a read at a time, rather than all at once, keeps a worker from
// holding more than it can handle within the visibility timeout.
func (w *worker) claimSome(ctx context.Context) (es []Entry, sweeping bool, err error) {
	next, raws, err := w.q.b.Claim(ctx, w.o.Consumer, w.o.Visibility, w.cursor, w.o.PerRead)
	if err != nil {
		return nil, true, err
	}
	claimed, err := entries(raws)
	if err != nil {
		return nil, true, err
	}
	if next == "" {
		next = "0-0"
	}
	w.cursor = next
	w.counts.Claimed += int64(len(claimed))
	for _, e := range claimed {
		if e.Deliveries <= w.o.MaxDeliveries {
			es = append(es, e)
			continue
		}
		msg, err := w.q.b.LastError(ctx, e.ID)
		if err != nil {
			return es, true, err
		}
		if msg == "" {
			msg = fmt.Sprintf("worker lost %d times", e.Deliveries-1)
		}
		if err := w.bury(ctx, e, msg); err != nil {
			return es, true, err
		}
	}
	return es, next != "0-0", nil
}

// handle paces and runs h; done reports success (the entry is to be
// acked). A failure is recorded, or the entry dead-lettered.
func (w *worker) handle(ctx, work context.Context, h handler, e Entry) (done bool, err error) {
	if w.pace != nil {
		if err := w.waitPace(ctx); err != nil {
			// Stopping: the entry stays pending and is claimed later.
			return false, nil
		}
	}
	stopped, herr := w.call(ctx, work, h, e)
	if stopped {
		w.o.Log.Warn("queue: stopping: handler cancelled after the shutdown timeout; the entry stays pending", "queue", w.q.name, "entry", e.ID, "shutdown_timeout", w.o.ShutdownTimeout)
		return false, nil
	}
	if herr == nil {
		return true, nil
	}
	w.counts.Failed++
	msg := truncate(herr.Error())
	w.o.Log.Warn("queue: handler failed", "queue", w.q.name, "entry", e.ID, "deliveries", e.Deliveries, "err", msg)
	// Recorded first, so that a crash before the dead letter leaves the
	// error for whoever claims the entry.
	if err := w.q.b.Fail(work, e.ID, msg); err != nil {
		return false, fmt.Errorf("queue %q: record failure of %s: %w", w.q.name, e.ID, err)
	}
	if e.Deliveries >= w.o.MaxDeliveries {
		return false, w.bury(work, e, msg)
	}
	return false, nil
}

var (
	errHandlerTimeout = errors.New("handler timeout")
	errShutdown       = errors.New("shutdown timeout")
)

// call runs h on e within the handler timeout, and within the shutdown
// timeout once ctx is done: stopped reports that the shutdown timeout
// cancelled it; err is h's error, or a timeout error when the handler
// timeout passed before h returned.
func (w *worker) call(ctx, work context.Context, h handler, e Entry) (stopped bool, err error) {
	hctx, cancel := context.WithCancelCause(work)
	defer cancel(nil)
	tctx, tcancel := context.WithTimeoutCause(hctx, w.o.HandlerTimeout, errHandlerTimeout)
	defer tcancel()
	if w.o.ShutdownTimeout > 0 {
		var mu sync.Mutex
		var grace *time.Timer
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			grace = time.AfterFunc(w.o.ShutdownTimeout, func() { cancel(errShutdown) })
			mu.Unlock()
		})
		defer func() {
			stop()
			mu.Lock()
			if grace != nil {
				grace.Stop()
			}
			mu.Unlock()
		}()
	}
	err = h(tctx, e)
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, errShutdown):
		return true, err
	case errors.Is(cause, errHandlerTimeout):
		if err == nil {
			err = errors.New("the handler returned after its timeout")
		}
		return false, fmt.Errorf("handler timed out after %v: %w", w.o.HandlerTimeout, err)
	}
	return false, err
}

// ackAll acks the handled entries of a read and counts them.
func (w *worker) ackAll(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	w.acked = append(w.acked[:0], make([]bool, len(ids))...)
	if err := w.q.b.AckAll(ctx, ids, w.acked); err != nil {
		return fmt.Errorf("queue %q: ack %d entries: %w", w.q.name, len(ids), err)
	}
	for _, ok := range w.acked {
		if ok {
			w.counts.Handled++
		} else {
			w.counts.Duplicates++
		}
	}
	return nil
}

// waitPace waits for the group's pace, within ctx; a store error is
// logged and retried.
func (w *worker) waitPace(ctx context.Context) error {
	for {
		err := w.pace.Wait(ctx, w.paceKey())
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, sluice.ErrWouldExceedDeadline) {
			<-ctx.Done()
			return ctx.Err()
		}
		w.o.Log.Warn("queue pace failed", "queue", w.q.name, "err", err)
		sleep(ctx, 100*time.Millisecond)
	}
}

// bury writes the dead letter first, then acks: a crash in between makes
// a duplicate dead letter, never a loss.
func (w *worker) bury(ctx context.Context, e Entry, msg string) error {
	r, err := raw(e)
	if err != nil {
		return fmt.Errorf("queue %q: dead-letter %s: %w", w.q.name, e.ID, err)
	}
	if err := w.q.b.DeadLetter(ctx, r, truncate(msg)); err != nil {
		return fmt.Errorf("queue %q: dead-letter %s: %w", w.q.name, e.ID, err)
	}
	if w.q.hooks.afterDeadLetter != nil {
		if err := w.q.hooks.afterDeadLetter(e); err != nil {
			return crash{err}
		}
	}
	if _, err := w.q.b.Ack(ctx, e.ID, true); err != nil {
		return fmt.Errorf("queue %q: ack dead letter %s: %w", w.q.name, e.ID, err)
	}
	w.counts.DeadLettered++
	return nil
}

// crash is a test hook's error: it stops Work as a crash would.
type crash struct{ err error }

func (c crash) Error() string { return c.err.Error() }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func encodeFields(f map[string]string) ([]byte, error) {
	if f == nil {
		f = map[string]string{}
	}
	if _, ok := f[""]; ok {
		return nil, errors.New("a field has an empty name")
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEntryBytes {
		return nil, fmt.Errorf("entry of %d bytes as JSON (at most %d)", len(b), MaxEntryBytes)
	}
	return b, nil
}

func decodeFields(b []byte) (map[string]string, error) {
	var f map[string]string
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("entry fields: %w", err)
	}
	return f, nil
}
