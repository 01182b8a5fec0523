package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue/backend"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// stores runs f on the memory store and on a real redis-server.
func stores(t *testing.T, f func(t *testing.T, st store.Store)) {
	t.Run("memory", func(t *testing.T) {
		st := memory.New()
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
	t.Run("redis", func(t *testing.T) {
		f(t, openRedisStore(t, redistest.Start(t).URL()))
	})
}

func openRedisStore(tb testing.TB, url string) *redis.Store {
	tb.Helper()
	st, err := redis.Open(context.Background(), url, redis.Options{Timeout: time.Minute}) // not the default second: a busy machine can outlast it
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func open(t *testing.T, st store.Store, name string, capacity int) *Queue {
	t.Helper()
	q, err := Open(context.Background(), st, name, Options{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestCapacityRace: 100 goroutines race to add to a queue of capacity 10;
// exactly 10 get ids, the rest a FullError with the length.
func TestCapacityRace(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		q := open(t, st, "race", 10)
		var ids sync.Map
		var added, full atomic.Int64
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := q.Add(context.Background(), map[string]string{"i": strconv.Itoa(i)}, "")
				var fe *FullError
				switch {
				case err == nil:
					added.Add(1)
					if _, dup := ids.LoadOrStore(a.ID, true); dup {
						t.Errorf("id %s given twice", a.ID)
					}
				case errors.As(err, &fe) && errors.Is(err, ErrFull) && fe.Length == 10:
					full.Add(1)
				default:
					t.Errorf("add: %v", err)
				}
			}()
		}
		wg.Wait()
		if added.Load() != 10 || full.Load() != 90 {
			t.Fatalf("added %d, full %d; want 10 and 90", added.Load(), full.Load())
		}
		s, err := q.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Length != 10 || s.Admitted != 10 || s.Pending != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestWorkAcksAndFrees: a handled entry leaves the queue, freeing a slot;
// the handler sees the producer's fields; the drain rate and the wait
// estimate follow.
func TestWorkAcksAndFrees(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "frees", 3)
		for i := range 3 {
			if _, err := q.Add(ctx, map[string]string{"n": strconv.Itoa(i)}, ""); err != nil {
				t.Fatal(err)
			}
		}
		var fe *FullError
		if _, err := q.Add(ctx, nil, ""); !errors.As(err, &fe) || fe.Wait != 0 {
			t.Fatalf("full queue before any drain: %v (want a FullError with an unknown wait)", err)
		}
		got := make(chan string, 3)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan Counts)
		go func() {
			c, err := q.Work(wctx, func(_ context.Context, e Entry) error {
				got <- e.Fields["n"]
				if len(got) == 3 {
					stop()
				}
				return nil
			}, WorkerOptions{Visibility: time.Second})
			if err != nil {
				t.Error(err)
			}
			done <- c
		}()
		c := <-done
		if c.Handled != 3 || c.Duplicates != 0 {
			t.Fatalf("counts %+v", c)
		}
		for _, want := range []string{"0", "1", "2"} {
			if n := <-got; n != want {
				t.Fatalf("handled %q, want %q (in order)", n, want)
			}
		}
		s, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Length != 0 || s.Acked != 3 || s.Delivered != 3 || s.DrainRate <= 0 || s.Consumers != 0 {
			t.Fatalf("stats after draining: %+v", s)
		}
		for range 3 {
			if _, err := q.Add(ctx, nil, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.Add(ctx, nil, ""); !errors.As(err, &fe) || fe.Wait <= 0 {
			t.Fatalf("full queue after a drain: %v (want a FullError with a wait)", err)
		}
	})
}

// TestDedup: a dedup id still queued answers its entry, and is a
// conflict with other fields; the handler sees the id; once handled the
// id is free again.
func TestDedup(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "dedup", 10)
		a, err := q.Add(ctx, map[string]string{"v": "1"}, "order-7")
		if err != nil {
			t.Fatal(err)
		}
		b, err := q.Add(ctx, map[string]string{"v": "1"}, "order-7")
		if err != nil || !b.Duplicate || b.ID != a.ID || b.Length != 1 {
			t.Fatalf("second add: %+v %v", b, err)
		}
		if c, err := q.Add(ctx, map[string]string{"v": "2"}, "order-7"); !errors.Is(err, ErrDedupConflict) || c.ID != a.ID || c.Duplicate {
			t.Fatalf("the id with other fields: %+v %v, want ErrDedupConflict", c, err)
		}
		var seen string
		drain(t, q, 1, func(_ context.Context, e Entry) error { seen = e.Dedup; return nil })
		if seen != "order-7" {
			t.Errorf("the handler saw dedup id %q", seen)
		}
		// Handled, the id is remembered (backend.DedupWindow): a retry of
		// the add answers the entry handled, and runs nothing again.
		c, err := q.Add(ctx, map[string]string{"v": "1"}, "order-7")
		if err != nil || !c.Duplicate || c.ID != a.ID || c.Length != 0 {
			t.Fatalf("the add again after handling: %+v %v, want the handled entry", c, err)
		}
		if c, err := q.Add(ctx, nil, "order-7"); !errors.Is(err, ErrDedupConflict) || c.ID != a.ID {
			t.Fatalf("the id with other fields after handling: %+v %v, want ErrDedupConflict", c, err)
		}
		// A dead-lettered entry's id is forgotten: its dead letter can be
		// requeued, and the id added anew.
		d, err := q.Add(ctx, map[string]string{"v": "3"}, "order-8")
		if err != nil {
			t.Fatal(err)
		}
		drainWith(t, q, 2, func(context.Context, Entry) error { return errors.New("poison") }, WorkerOptions{Visibility: time.Second, MaxDeliveries: 1, PerRead: 4})
		if e, err := q.Add(ctx, map[string]string{"v": "3"}, "order-8"); err != nil || e.Duplicate || e.ID == d.ID {
			t.Fatalf("the id of a dead letter: %+v %v, want a new entry", e, err)
		}
	})
}

// drain runs one worker until n entries were acked or dead-lettered. The
// tests' visibility timeout is a second (their handler timeout 750ms): short
// enough that redeliveries come soon, long enough that no handler of
// theirs outlasts it on a busy machine (200ms, a handler timeout of 150ms,
// was not).
func drain(t *testing.T, q *Queue, n int64, h handler) Counts {
	return drainWith(t, q, n, h, WorkerOptions{Visibility: time.Second, MaxDeliveries: 3, PerRead: 4})
}

func drainWith(t *testing.T, q *Queue, n int64, h handler, o WorkerOptions) Counts {
	t.Helper()
	// A safety net, not a deadline: the watcher below stops the worker
	// once n entries are done, on any machine long before this.
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	go func() {
		for ctx.Err() == nil {
			s, err := q.Stats(ctx)
			if err == nil && s.Acked+s.DeadLetters >= n {
				stop()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	c, err := q.Work(ctx, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPoison: an entry whose handler always fails goes to the dead-letter
// list after MaxDeliveries deliveries, with its last error; the others
// are handled.
func TestPoison(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "poison", 10)
		for _, v := range []string{"ok", "poison", "ok"} {
			if _, err := q.Add(ctx, map[string]string{"v": v}, ""); err != nil {
				t.Fatal(err)
			}
		}
		var tries atomic.Int64
		c := drain(t, q, 3, func(_ context.Context, e Entry) error {
			if e.Fields["v"] == "poison" {
				return fmt.Errorf("attempt %d failed", tries.Add(1))
			}
			return nil
		})
		if c.Handled != 2 || c.DeadLettered != 1 || c.Failed != 3 || tries.Load() != 3 {
			t.Fatalf("counts %+v, tries %d", c, tries.Load())
		}
		dl, err := q.DeadLetters(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dl) != 1 || dl[0].Fields["v"] != "poison" || dl[0].Error != "attempt 3 failed" || dl[0].Deliveries != 3 {
			t.Fatalf("dead letters %+v", dl)
		}
		s, _ := q.Stats(ctx)
		if s.Length != 0 || s.DeadLetters != 1 || s.Acked != 2 {
			t.Fatalf("stats %+v", s)
		}
	})
}

var errCrash = errors.New("injected crash")

// TestCrashBetweenReadAndAck: a worker dies holding entries it read; a
// live worker claims them after the visibility timeout and handles them.
func TestCrashBetweenReadAndAck(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "crash-read", 10)
		for i := range 5 {
			if _, err := q.Add(ctx, map[string]string{"i": strconv.Itoa(i)}, ""); err != nil {
				t.Fatal(err)
			}
		}
		dying := open(t, st, "crash-read", 10) // another handle on the queue
		dying.hooks.afterRead = func([]Entry) error { return errCrash }
		if _, err := dying.Work(ctx, func(context.Context, Entry) error { return nil },
			WorkerOptions{PerRead: 3, Visibility: time.Second}); !errors.Is(err, errCrash) {
			t.Fatalf("dying worker: %v", err)
		}
		if s, _ := q.Stats(ctx); s.Pending != 3 {
			t.Fatalf("after the crash: %+v, want 3 pending", s)
		}
		handled := map[string]int{}
		var mu sync.Mutex
		// PerRead 1: the claim follows its cursor over three turns.
		c := drainWith(t, q, 5, func(_ context.Context, e Entry) error {
			mu.Lock()
			handled[e.Fields["i"]]++
			mu.Unlock()
			return nil
		}, WorkerOptions{Visibility: time.Second, PerRead: 1})
		if len(handled) != 5 || c.Claimed != 3 {
			t.Fatalf("handled %v, counts %+v", handled, c)
		}
		if s, _ := q.Stats(ctx); s.Length != 0 || s.Pending != 0 {
			t.Fatalf("left %+v", s)
		}
	})
}

// TestCrashBetweenDeadLetterAndAck: a worker dies after writing a dead
// letter and before acking it; the entry is dead-lettered again by the
// next worker: a duplicate dead letter, no loss.
func TestCrashBetweenDeadLetterAndAck(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "crash-dead", 10)
		if _, err := q.Add(ctx, map[string]string{"v": "poison"}, ""); err != nil {
			t.Fatal(err)
		}
		dying := open(t, st, "crash-dead", 10) // another handle on the queue
		dying.hooks.afterDeadLetter = func(Entry) error { return errCrash }
		_, err := dying.Work(ctx, func(context.Context, Entry) error { return errors.New("bad") },
			WorkerOptions{MaxDeliveries: 1, Visibility: time.Second})
		if !errors.Is(err, errCrash) {
			t.Fatalf("dying worker: %v", err)
		}
		if s, _ := q.Stats(ctx); s.Length != 1 || s.DeadLetters != 1 {
			t.Fatalf("after the crash: %+v, want the entry queued and dead-lettered", s)
		}
		c := drainWith(t, q, 2, func(context.Context, Entry) error { return errors.New("never called") },
			WorkerOptions{MaxDeliveries: 1, Visibility: time.Second})
		if c.DeadLettered != 1 || c.Failed != 0 {
			t.Fatalf("counts %+v", c)
		}
		dl, _ := q.DeadLetters(ctx, 10)
		if len(dl) != 2 || dl[0].ID != dl[1].ID || dl[0].Error != "bad" || dl[1].Error != "bad" {
			t.Fatalf("dead letters %+v", dl)
		}
		if s, _ := q.Stats(ctx); s.Length != 0 || s.Pending != 0 {
			t.Fatalf("left %+v", s)
		}
	})
}

// TestPacing: a worker paced at 20/s is never faster than the pace (the
// first entry is free, then one each 50 ms): its 10th entry comes at
// least 450 ms after Work began (not after its 1st entry's handler began,
// which a busy machine may run well after the entry's turn came). A slow
// machine only makes it later, so the test waits for no deadline.
func TestPacing(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "paced", 100)
		for range 100 {
			if _, err := q.Add(ctx, nil, ""); err != nil {
				t.Fatal(err)
			}
		}
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		n := 0
		first := time.Now() // no later than the 1st entry's turn
		c, err := q.Work(wctx, func(context.Context, Entry) error {
			if n++; n == 10 {
				if el := time.Since(first); el < 450*time.Millisecond {
					t.Errorf("10 entries handled in %v at 20/s", el)
				}
				stop()
			}
			return nil
		}, WorkerOptions{Rate: 20})
		if err != nil || c.Handled != 10 {
			t.Fatalf("handled %d: %v", c.Handled, err)
		}
	})
}

// TestBounds: names, entries and dedup ids are bounded.
func TestBounds(t *testing.T) {
	st := memory.New()
	defer st.Close()
	if _, err := Open(context.Background(), st, "", Options{}); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := Open(context.Background(), st, string(make([]byte, MaxNameBytes+1)), Options{}); err == nil {
		t.Error("long name accepted")
	}
	q := open(t, st, "b", 10)
	if _, err := q.Add(context.Background(), map[string]string{"x": string(make([]byte, MaxEntryBytes))}, ""); err == nil {
		t.Error("large entry accepted")
	}
	if _, err := q.Add(context.Background(), map[string]string{"": ""}, ""); !errors.Is(err, ErrBadEntry) {
		t.Errorf("a field without a name: %v", err)
	}
	if _, err := q.Add(context.Background(), map[string]string{}, ""); err != nil {
		t.Errorf("an entry without fields: %v", err)
	}
	if _, err := q.Add(context.Background(), nil, string(make([]byte, MaxDedupBytes+1))); err == nil {
		t.Error("long dedup id accepted")
	}
}

// TestReadAndWorkerBounds: a dead-letter read's count and a worker's
// options out of their ranges are errors on both stores (before, a
// negative count panicked on the memory store and read nothing on Redis,
// and a negative visibility or delivery count quietly became the default).
func TestReadAndWorkerBounds(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "bounds", 10)
		for _, n := range []int{-1, 0, MaxDeadLetters + 1} {
			if _, err := q.DeadLetters(ctx, n); err == nil {
				t.Errorf("DeadLetters(%d): no error", n)
			}
		}
		if _, err := q.DeadLetters(ctx, MaxDeadLetters); err != nil {
			t.Errorf("DeadLetters(MaxDeadLetters): %v", err)
		}
		for _, o := range []WorkerOptions{{Visibility: -time.Second}, {HandlerTimeout: -time.Second}, {ShutdownTimeout: -time.Second},
			{MaxDeliveries: -1}, {PerRead: -1}, {PerRead: maxPerRead + 1}, {Rate: -1}, {Rate: math.NaN()}} {
			if _, err := q.Add(ctx, nil, ""); err != nil {
				t.Fatal(err)
			}
			// A worker that starts handles the entry, and stops there.
			wctx, stop := context.WithCancel(ctx)
			called := false
			_, err := q.Work(wctx, func(context.Context, Entry) error { called = true; stop(); return nil }, o)
			stop()
			if err == nil || called {
				t.Errorf("%+v: %v, handler called %v", o, err, called)
			}
		}
	})
}

// TestEvictionWarning: a Redis that may evict keys gets a warning, one
// with noeviction none.
func TestEvictionWarning(t *testing.T) {
	ctx := context.Background()
	if w := EvictionWarning(ctx, openRedisStore(t, redistest.Start(t).URL())); w != "" {
		t.Errorf("noeviction: %q", w)
	}
	lru := openRedisStore(t, redistest.Start(t, "--maxmemory-policy", "allkeys-lru").URL())
	if w := EvictionWarning(ctx, lru); !strings.Contains(w, "allkeys-lru") {
		t.Errorf("allkeys-lru: %q", w)
	}
}

// TestOnCluster: a queue's keys (stream, dead letters, hashes) share one
// slot, so its scripts run on a Redis Cluster; the pace key too.
func TestOnCluster(t *testing.T) {
	st := openRedisStore(t, redistest.StartCluster(t).URL())
	ctx := context.Background()
	q := open(t, st, "on-cluster", 3)
	for i := range 4 {
		_, err := q.Add(ctx, map[string]string{"i": strconv.Itoa(i)}, "d"+strconv.Itoa(i))
		if want := i < 3; (err == nil) != want {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	c := drainWith(t, q, 3, func(_ context.Context, e Entry) error {
		if e.Fields["i"] == "2" && e.Deliveries == 1 {
			return errors.New("once")
		}
		return nil
	}, WorkerOptions{Visibility: time.Second, Rate: 1000})
	if c.Handled != 3 || c.Failed != 1 {
		t.Fatalf("counts %+v", c)
	}
	if s, err := q.Stats(ctx); err != nil || s.Length != 0 || s.Acked != 3 || s.Delivered != 4 {
		t.Fatalf("stats %+v %v", s, err)
	}
}

// TestStuckWorker: a handler that ignores its context and outlasts the
// visibility timeout loses its entry to a live worker, which handles it;
// the stuck one's late success counts as a failure (its handler timeout
// passed).
func TestStuckWorker(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "stuck", 10)
		if _, err := q.Add(ctx, map[string]string{"v": "slow"}, ""); err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		release := make(chan struct{})
		slowDone := make(chan Counts)
		slowCtx, stopSlow := context.WithCancel(ctx)
		defer stopSlow()
		go func() {
			c, err := q.Work(slowCtx, func(context.Context, Entry) error {
				close(started)
				<-release
				return nil
			}, WorkerOptions{Visibility: time.Second})
			if err != nil {
				t.Error(err)
			}
			slowDone <- c
		}()
		<-started
		fast := drainWith(t, q, 1, func(_ context.Context, e Entry) error {
			if e.Deliveries != 2 {
				t.Errorf("claimed entry delivered %d times, want 2", e.Deliveries)
			}
			return nil
		}, WorkerOptions{Visibility: time.Second})
		stopSlow()
		close(release)
		slow := <-slowDone
		if fast.Handled != 1 || fast.Claimed != 1 || slow.Handled != 0 || slow.Failed != 1 {
			t.Fatalf("fast %+v, slow %+v", fast, slow)
		}
		if s, _ := q.Stats(ctx); s.Length != 0 || s.Acked != 1 || s.Pending != 0 || s.DeadLetters != 0 {
			t.Fatalf("stats %+v", s)
		}

	})
}

// TestHandlerTimeout: a handler that hangs past HandlerTimeout has its
// context cancelled and its delivery counted as failed, logged with the
// entry's id; with MaxDeliveries 1 it is dead-lettered at once, long
// before the visibility timeout could hand it to a second worker.
func TestHandlerTimeout(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "hang", 10)
		a, err := q.Add(ctx, map[string]string{"v": "hang"}, "")
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		c := drainWith(t, q, 1, func(ctx context.Context, e Entry) error {
			<-ctx.Done() // hangs until the worker gives up on it
			return nil
		}, WorkerOptions{Visibility: time.Minute, HandlerTimeout: 50 * time.Millisecond, MaxDeliveries: 1,
			Log: slog.New(slog.NewTextHandler(&log, nil))})
		if c.Failed != 1 || c.DeadLettered != 1 || c.Handled != 0 {
			t.Fatalf("counts %+v", c)
		}
		dl, err := q.DeadLetters(ctx, 10)
		if err != nil || len(dl) != 1 || !strings.Contains(dl[0].Error, "handler timed out after 50ms") {
			t.Fatalf("dead letters %+v %v", dl, err)
		}
		if !strings.Contains(log.String(), "entry="+a.ID) {
			t.Errorf("the failure was not logged with the entry's id:\n%s", log.String())
		}
		if _, err := q.Work(ctx, nil, WorkerOptions{Visibility: time.Second, HandlerTimeout: time.Second}); err == nil {
			t.Error("a handler timeout as long as the visibility timeout was accepted")
		}
	})
}

// TestShutdownTimeout: once Work's context is done, the entry in hand
// runs at most ShutdownTimeout more; then its handler is cancelled and the
// entry stays pending for a live worker, not counted as failed.
func TestShutdownTimeout(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "drain", 10)
		if _, err := q.Add(ctx, map[string]string{"v": "long"}, ""); err != nil {
			t.Fatal(err)
		}
		work, stop := context.WithCancel(ctx)
		var cause error
		c, err := q.Work(work, func(hctx context.Context, e Entry) error {
			stop() // SIGTERM while the entry is in hand
			<-hctx.Done()
			cause = context.Cause(hctx)
			return hctx.Err()
		}, WorkerOptions{Visibility: time.Hour, HandlerTimeout: 59 * time.Minute, ShutdownTimeout: 50 * time.Millisecond})
		if err != nil || c.Failed != 0 || c.Handled != 0 {
			t.Fatalf("Work: %+v %v", c, err)
		}
		if cause == nil || !strings.Contains(cause.Error(), "shutdown timeout") {
			t.Errorf("the handler's context ended with %v", cause)
		}
		if s, err := q.Stats(ctx); err != nil || s.Length != 1 || s.Pending != 1 {
			t.Fatalf("stats %+v %v: want the entry pending", s, err)
		}
	})
}

// TestClose: a closed handle refuses calls and stops its Work; another
// handle on the queue goes on. The memory store's Close releases its
// queues: their handles fail with backend.ErrClosed, and a new store starts
// with none (they once lived in a process-wide map, never emptied).
func TestClose(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q, other := open(t, st, "closing", 10), open(t, st, "closing", 10)
		if _, err := q.Add(ctx, nil, ""); err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		worked := make(chan error)
		go func() {
			_, err := q.Work(ctx, func(context.Context, Entry) error {
				close(started)
				<-release
				return nil
			}, WorkerOptions{Visibility: time.Minute})
			worked <- err
		}()
		<-started
		q.Close() // while Work has an entry in hand
		close(release)
		if err := <-worked; err != nil {
			t.Fatalf("Work stopped by Close: %v", err)
		}
		if _, err := q.Add(ctx, nil, ""); !errors.Is(err, ErrClosed) {
			t.Errorf("Add on a closed handle: %v", err)
		}
		if _, err := q.Work(ctx, nil, WorkerOptions{}); !errors.Is(err, ErrClosed) {
			t.Errorf("Work on a closed handle: %v", err)
		}
		if _, err := other.Add(ctx, nil, ""); err != nil {
			t.Errorf("Add on another handle: %v", err)
		}
	})
	st := memory.New()
	q := open(t, st, "released", 10)
	if _, err := q.Add(context.Background(), nil, ""); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := q.Add(context.Background(), nil, ""); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Add after the store closed: %v", err)
	}
	fresh := memory.New()
	defer fresh.Close()
	if s, err := open(t, fresh, "released", 10).Stats(context.Background()); err != nil || s.Length != 0 {
		t.Errorf("a new store's queue: %+v %v", s, err)
	}
}

// TestCapacityIsTheDefinition: a queue's capacity belongs to its
// definition in the store, not to whoever adds last (a handle with
// another capacity is refused; one without takes the queue's); Define
// changes it for every handle; a name never defined is an error, and
// opening it creates nothing.
func TestCapacityIsTheDefinition(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "defined", 2)
		other, err := Open(ctx, st, "defined", Options{})
		if err != nil || other.Capacity() != 2 {
			t.Fatalf("open without a capacity: %v, capacity %d", err, other.Capacity())
		}
		if _, err := Open(ctx, st, "defined", Options{Capacity: 1000}); !errors.Is(err, ErrCapacity) {
			t.Fatalf("open with another capacity: %v", err)
		}
		for i := range 3 {
			_, err := other.Add(ctx, map[string]string{"i": strconv.Itoa(i)}, "")
			if (i < 2) != (err == nil) {
				t.Fatalf("add %d to a queue of 2: %v", i, err)
			}
		}
		if err := Define(ctx, st, "defined", 3); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Add(ctx, nil, ""); err != nil {
			t.Fatalf("add after Define(3): %v", err)
		}
		if s, err := q.Stats(ctx); err != nil || s.Capacity != 3 || s.Length != 3 {
			t.Fatalf("stats %+v %v", s, err)
		}
		for range 2 {
			if _, err := Open(ctx, st, "defind", Options{}); !errors.Is(err, ErrUnknownQueue) {
				t.Fatalf("a misspelled name: %v", err)
			}
		}
	})
}

// TestDeadLetterRequeueAndDrop: a dead letter can be requeued (a new
// entry with its fields and dedup id, the dead letter gone) or dropped;
// unknown ids are errors.
func TestDeadLetterRequeueAndDrop(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		q := open(t, st, "dead", 10)
		for _, v := range []string{"a", "b"} {
			if _, err := q.Add(ctx, map[string]string{"v": v}, "order-"+v); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, q, 2, func(context.Context, Entry) error { return errors.New("broken") })
		dls, err := q.DeadLetters(ctx, 10)
		if err != nil || len(dls) != 2 {
			t.Fatalf("dead letters %+v %v", dls, err)
		}
		if dls[0].Fields["v"] != "a" { // the order they died in: either
			dls[0], dls[1] = dls[1], dls[0]
		}
		if dls[0].DeadID == "" || dls[0].Fields["v"] != "a" || dls[0].Dedup != "order-a" || dls[1].Fields["v"] != "b" {
			t.Fatalf("dead letters %+v", dls)
		}
		a, err := q.Requeue(ctx, dls[0].DeadID)
		if err != nil || a.ID == "" || a.Duplicate {
			t.Fatalf("requeue: %+v %v", a, err)
		}
		if err := q.Drop(ctx, dls[1].DeadID); err != nil {
			t.Fatal(err)
		}
		if left, err := q.DeadLetters(ctx, 10); err != nil || len(left) != 0 {
			t.Fatalf("dead letters after: %+v %v", left, err)
		}
		var got Entry
		drain(t, q, 1, func(_ context.Context, e Entry) error { got = e; return nil }) // the dead list is empty now: 1 acked
		if got.Fields["v"] != "a" || got.Dedup != "order-a" || got.ID != a.ID {
			t.Fatalf("the requeued entry: %+v", got)
		}
		if _, err := q.Requeue(ctx, dls[0].DeadID); !errors.Is(err, ErrNoDeadLetter) {
			t.Errorf("requeue twice: %v", err)
		}
		if err := q.Drop(ctx, "1-1"); !errors.Is(err, ErrNoDeadLetter) {
			t.Errorf("drop of no dead letter: %v", err)
		}
	})
}
