package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store"
)

const queueUsage = `usage: sluice queue <add|stats|work> [flags] NAME ...

  sluice queue add [--capacity N] [--dedup ID] NAME k=v ...
      admit an entry; print its id, or exit 1 with the length and the
      estimated wait when the queue is full. Without --dedup the entry
      gets a fresh dedup id; when the store fails, the error names it, so
      that a retry with it cannot queue the entry twice
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

Every command takes --store URL. Processes share a queue only through a
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
	fs := flag.NewFlagSet("queue "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { fmt.Fprintln(e.stderr, queueUsage+"\n\nflags:"); fs.PrintDefaults() }
	fs.String("store", "", "the store's URL (redis://host:port/db, a Cluster seed list or Sentinel)")
	group := fs.String("group", "workers", "the consumer group")
	opts := queue.Options{}
	switch sub {
	case "add":
		fs.IntVar(&opts.Capacity, "capacity", 1000, "the most entries the queue holds")
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
	fmt.Fprintf(e.stderr, "queue: unknown command %q\n\n%s\n", sub, queueUsage)
	return 2
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
	url := fs.Lookup("store").Value.String()
	fail := func(code int) (*queue.Queue, func(), int) { return nil, nil, code }
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		fmt.Fprintf(e.stderr, "queue: %v\n", err)
		return fail(1)
	}
	if !queue.Shared(st) {
		st.Close()
		fmt.Fprintln(e.stderr, "queue: processes share a queue only through Redis: give --store redis://host:port")
		return fail(2)
	}
	opts.Group = *group
	q, err := queue.Open(ctx, st, fs.Arg(0), *opts)
	if err != nil {
		st.Close()
		fmt.Fprintf(e.stderr, "queue: %v\n", err)
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
		fmt.Fprintf(e.stderr, "queue add: --dedup %s is queued (entry %s) with other fields; nothing was queued\n", dedup, a.ID)
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
	h := func(ctx context.Context, en queue.Entry) error {
		in, err := json.Marshal(en.Fields)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		// Stopped as a group, so that a shell's children go too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 2 * time.Second
		cmd.Stdin = bytes.NewReader(in)
		cmd.Stdout = e.stdout
		var stderr bytes.Buffer
		cmd.Stderr = io.MultiWriter(e.stderr, &limited{&stderr, 1024})
		cmd.Env = append(os.Environ(), "SLUICE_ENTRY_ID="+en.ID, "SLUICE_ENTRY_DEDUP="+en.Dedup, "SLUICE_ENTRY_DELIVERIES="+strconv.FormatInt(en.Deliveries, 10))
		if err := cmd.Run(); err != nil {
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				return fmt.Errorf("%w: %s", err, msg)
			}
			return err
		}
		return nil
	}
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
