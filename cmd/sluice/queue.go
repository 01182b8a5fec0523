package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store"
)

const queueUsage = `usage: sluice queue <define|add|stats|work|dead> [flags] NAME ...

  sluice queue define --capacity N NAME
      define the queue NAME, or change its capacity. A queue's capacity
      belongs to its definition in the store: every producer, the CLI's
      and the service's, admits by it
  sluice queue add [--capacity N] [--dedup ID] NAME k=v ...
      admit an entry; print its id, or exit 1 with the length and the
      estimated wait when the queue is full. --capacity defines a new
      queue; for an existing one it must be its capacity, or be left out.
      A queue never defined is an error (a misspelled name). Without
      --dedup the entry gets a fresh dedup id; when the store fails, the
      error names it, so that a retry with it cannot queue the entry twice
  sluice queue stats NAME
      print JSON: length, pending, consumers, dead letters, admitted,
      delivered, acked, drain rate
  sluice queue work [--rate R] [--visibility D] [--max-deliveries N]
                    [--handler-timeout D] [--shutdown-timeout D] NAME -- CMD ARGS...
      run CMD once per entry, the entry's fields as a JSON object on its
      stdin and its id in SLUICE_ENTRY_ID (its dedup id in
      SLUICE_ENTRY_DEDUP, deliveries in SLUICE_ENTRY_DELIVERIES); exit
      status 0 acks the entry, anything else is a failed delivery, logged
      with the entry's id. A CMD that runs past --handler-timeout (default
      3/4 of --visibility) is stopped and its delivery failed. SIGTERM
      finishes the entry in hand (for at most --shutdown-timeout, 10s;
      then it stops CMD and leaves the entry for another worker) and
      exits 0, printing what the worker did as JSON on stderr.

  sluice queue dead list [--count N] NAME
      print the oldest dead letters, one JSON object a line: dead_id,
      id, fields, dedup, deliveries, error
  sluice queue dead show NAME DEAD_ID
      print one dead letter
  sluice queue dead requeue NAME DEAD_ID...
      move dead letters back into the queue as new entries (with their
      fields and dedup ids), while it has room; print each new id
  sluice queue dead drop NAME DEAD_ID...
      remove dead letters

Every command but add with --capacity and define refuses a queue never
defined (exit 1). Every command takes --store URL. Processes share a queue only through a
shared store, so the queue commands need a Redis URL (redis://...); the
memory store's queue lives inside one process (the Go API).`

func runQueue(ctx context.Context, e env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stderr, queueUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, args := args[0], args[1:]
	fs := newFlags(e, "queue "+sub, queueUsage+"\n\nflags:")
	fs.String("store", "", "the store's URL (redis://host:port/db, a Cluster seed list or Sentinel)")
	group := fs.String("group", "workers", "the consumer group")
	opts := queue.Options{}
	switch sub {
	case "define":
		capacity := fs.Int("capacity", 0, "the most entries the queue holds")
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		if fs.NArg() != 1 || *capacity <= 0 {
			fs.Usage()
			return 2
		}
		return queueDefine(ctx, e, fs.Lookup("store").Value.String(), fs.Arg(0), *capacity)
	case "dead":
		return runDead(ctx, e, fs, args, &opts, group)
	case "add":
		fs.IntVar(&opts.Capacity, "capacity", 0, "the most entries the queue holds: defines a new queue; an existing one keeps its own")
		dedup := fs.String("dedup", "", "a deduplication id: while an entry with it is queued, answer that entry")
		q, done, code := openQueue(ctx, e, fs, args, &opts, group, 1)
		if q == nil {
			return code
		}
		defer done()
		return queueAdd(ctx, e, q, fs.Args()[1:], *dedup)
	case "stats":
		q, done, code := openQueue(ctx, e, fs, args, &opts, group, 1)
		if q == nil {
			return code
		}
		defer done()
		if fs.NArg() != 1 {
			fs.Usage()
			return 2
		}
		return queueStats(ctx, e, q)
	case "work":
		var o queue.WorkerOptions
		fs.Float64Var(&o.Rate, "rate", 0, "at most R entries per second for all workers of the queue together (0: as fast as CMD goes)")
		fs.DurationVar(&o.Visibility, "visibility", 30*time.Second, "claim entries a worker held longer than this")
		fs.Int64Var(&o.MaxDeliveries, "max-deliveries", 5, "dead-letter an entry after this many failed deliveries")
		fs.StringVar(&o.Consumer, "consumer", "", "this worker's name in the group (default host-pid-n)")
		fs.DurationVar(&o.HandlerTimeout, "handler-timeout", 0, "stop CMD (SIGTERM to its process group, SIGKILL 2s later) after this long and count the delivery as failed; below --visibility (default 3/4 of it)")
		fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "after SIGTERM, stop the CMD in hand after this long and leave its entry pending for another worker")
		q, done, code := openQueue(ctx, e, fs, args, &opts, group, 2)
		if q == nil {
			return code
		}
		defer done()
		return queueWork(ctx, e, q, fs.Args()[1:], o)
	}
	fmt.Fprintf(e.stderr, "sluice queue: unknown command %q%s; sluice queue -h lists the commands\n", sub, yamlfile.DidYouMean(sub, []string{"define", "add", "stats", "work", "dead"}, ""))
	return 2
}

// queueDefine defines the queue name, or changes its capacity.
func queueDefine(ctx context.Context, e env, url, name string, capacity int) int {
	st, code := openSharedStore(ctx, e, url)
	if st == nil {
		return code
	}
	defer st.Close()
	if err := queue.Define(ctx, st, name, capacity); err != nil {
		fmt.Fprintf(e.stderr, "queue define: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "%s: capacity %d\n", name, capacity)
	return 0
}

// runDead serves the dead subcommands: list, show, requeue and drop.
func runDead(ctx context.Context, e env, fs *flag.FlagSet, args []string, opts *queue.Options, group *string) int {
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	cmd, args := args[0], args[1:]
	if cmd == "-h" || cmd == "--help" {
		fs.Usage()
		return 0
	}
	count := fs.Int("count", 100, "list: the most dead letters to print")
	minArgs := map[string]int{"list": 1, "show": 2, "requeue": 2, "drop": 2}[cmd]
	if minArgs == 0 {
		fmt.Fprintf(e.stderr, "queue dead: unknown command %q (want list, show, requeue or drop)\n", cmd)
		return 2
	}
	q, done, code := openQueue(ctx, e, fs, args, opts, group, minArgs)
	if q == nil {
		return code
	}
	defer done()
	ids := fs.Args()[1:]
	switch cmd {
	case "list", "show":
		n := *count
		if cmd == "show" {
			n = queue.MaxDeadLetters
		}
		dls, err := q.DeadLetters(ctx, n)
		if err != nil {
			fmt.Fprintf(e.stderr, "queue dead %s: %v\n", cmd, err)
			return 1
		}
		shown := 0
		for _, d := range dls {
			if cmd == "show" && d.DeadID != ids[0] {
				continue
			}
			b, _ := json.Marshal(map[string]any{"dead_id": d.DeadID, "id": d.ID, "fields": d.Fields, "dedup": d.Dedup,
				"deliveries": d.Deliveries, "error": d.Error})
			fmt.Fprintf(e.stdout, "%s\n", b)
			shown++
		}
		if cmd == "show" && shown == 0 {
			fmt.Fprintf(e.stderr, "queue dead show: %s: no dead letter %s among the oldest %d\n", q.Name(), ids[0], queue.MaxDeadLetters)
			return 1
		}
		return 0
	case "requeue":
		status := 0
		for _, id := range ids {
			a, err := q.Requeue(ctx, id)
			switch {
			case err != nil:
				fmt.Fprintf(e.stderr, "queue dead requeue: %v\n", err)
				status = 1
			case a.Duplicate:
				fmt.Fprintf(e.stdout, "%s: its dedup id is queued as %s; the dead letter stays\n", id, a.ID)
			default:
				fmt.Fprintf(e.stdout, "%s: requeued as %s\n", id, a.ID)
			}
		}
		return status
	default: // drop
		status := 0
		for _, id := range ids {
			if err := q.Drop(ctx, id); err != nil {
				fmt.Fprintf(e.stderr, "queue dead drop: %v\n", err)
				status = 1
				continue
			}
			fmt.Fprintf(e.stdout, "%s: dropped\n", id)
		}
		return status
	}
}

// openSharedStore opens the store at url, which must share queues between
// processes (Redis). It returns nil and the exit code when it cannot.
func openSharedStore(ctx context.Context, e env, url string) (store.Store, int) {
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		fmt.Fprintf(e.stderr, "queue: %v\n", err)
		return nil, 1
	}
	if !queue.Shared(st) {
		st.Close()
		fmt.Fprintln(e.stderr, "queue: processes share a queue only through Redis: give --store redis://host:port")
		return nil, 2
	}
	return st, 0
}

// openQueue parses flags and opens the queue named by the first argument
// in the store; it needs at least minArgs arguments. It returns nil and
// the exit code when it cannot.
func openQueue(ctx context.Context, e env, fs *flag.FlagSet, args []string,
	opts *queue.Options, group *string, minArgs int) (*queue.Queue, func(), int) {
	if code, ok := parseFlags(fs, args); !ok {
		return nil, nil, code
	}
	if fs.NArg() < minArgs {
		fs.Usage()
		return nil, nil, 2
	}
	fail := func(code int) (*queue.Queue, func(), int) { return nil, nil, code }
	st, code := openSharedStore(ctx, e, fs.Lookup("store").Value.String())
	if st == nil {
		return fail(code)
	}
	opts.Group = *group
	q, err := queue.Open(ctx, st, fs.Arg(0), *opts)
	if err != nil {
		st.Close()
		fmt.Fprintf(e.stderr, "queue: %v\n", err)
		if errors.Is(err, queue.ErrUnknownQueue) {
			fmt.Fprintf(e.stderr, "queue: define it with: sluice queue define --store URL --capacity N %s\n", fs.Arg(0))
		}
		return fail(1)
	}
	if w := queue.EvictionWarning(ctx, st); w != "" {
		fmt.Fprintf(e.stderr, "queue: warning: %s\n", w)
	}
	return q, func() { st.Close() }, 0
}

func queueAdd(ctx context.Context, e env, q *queue.Queue, kvs []string, dedup string) int {
	fields := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(e.stderr, "queue add: %q is not k=v\n", kv)
			return 2
		}
		fields[k] = v
	}
	if dedup == "" {
		dedup = queue.NewDedupID()
	}
	a, err := q.Add(ctx, fields, dedup)
	var full *queue.FullError
	if errors.As(err, &full) {
		wait := "unknown"
		if full.Wait > 0 {
			wait = full.Wait.Round(time.Millisecond).String()
		}
		fmt.Fprintf(e.stderr, "queue add: %s is full: length %d, estimated wait %s\n", q.Name(), full.Length, wait)
		return 1
	}
	if errors.Is(err, queue.ErrDedupConflict) {
		fmt.Fprintf(e.stderr, "queue add: --dedup %s was added (entry %s) with other fields; nothing was queued\n", dedup, a.ID)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "queue add: %v\nthe entry may have been queued: retry with --dedup %s, which prints its id if it was\n", err, dedup)
		return 1
	}
	fmt.Fprintln(e.stdout, a.ID)
	return 0
}

func queueStats(ctx context.Context, e env, q *queue.Queue) int {
	s, err := q.Stats(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "queue stats: %v\n", err)
		return 1
	}
	b, _ := json.Marshal(s)
	fmt.Fprintf(e.stdout, "%s\n", b)
	return 0
}

func queueWork(ctx context.Context, e env, q *queue.Queue, argv []string, o queue.WorkerOptions) int {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		fmt.Fprintln(e.stderr, "queue work: give the command to run after --")
		return 2
	}
	self, err := os.Executable()
	var guarded *guard
	if err == nil {
		guarded, err = startGuard(self)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "queue work: %v\n", err)
		return 1
	}
	defer guarded.close()
	h := func(ctx context.Context, en queue.Entry) error {
		in, err := json.Marshal(en.Fields)
		if err != nil {
			return err
		}
		var stderr bytes.Buffer
		command := func() *exec.Cmd {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			// A group of its own, stopped as a whole (a shell's children
			// too), and killed by the guard if this worker dies (guard.go).
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
			cmd.WaitDelay = 2 * time.Second
			cmd.Stdin = bytes.NewReader(in)
			cmd.Stdout = e.stdout
			cmd.Stderr = io.MultiWriter(e.stderr, &limited{&stderr, 1024})
			cmd.Env = append(os.Environ(), "SLUICE_ENTRY_ID="+en.ID, "SLUICE_ENTRY_DEDUP="+en.Dedup, "SLUICE_ENTRY_DELIVERIES="+strconv.FormatInt(en.Deliveries, 10))
			return cmd
		}
		// Pdeathsig and ptrace follow the thread that starts the command:
		// keep it until the command has ended.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd, held, err := startHeld(command)
		if err == nil {
			guarded.tell('+', cmd.Process.Pid)
			if held {
				err = release(cmd)
			}
			if err == nil {
				err = cmd.Wait()
			} else {
				cmd.Process.Kill()
				cmd.Wait()
			}
			guarded.tell('-', cmd.Process.Pid)
		}
		if err != nil {
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				return fmt.Errorf("%w: %s", err, msg)
			}
			return err
		}
		return nil
	}
	o.Log = slog.New(slog.NewTextHandler(e.stderr, nil)) // as serve logs
	c, err := q.Work(ctx, h, o)
	b, _ := json.Marshal(map[string]int64{"handled": c.Handled, "duplicates": c.Duplicates, "failed": c.Failed,
		"dead_lettered": c.DeadLettered, "claimed": c.Claimed})
	fmt.Fprintf(e.stderr, "%s\n", b)
	if err != nil {
		fmt.Fprintf(e.stderr, "queue work: %v\n", err)
		return 1
	}
	return 0
}

// limited keeps the first n bytes written to it.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
