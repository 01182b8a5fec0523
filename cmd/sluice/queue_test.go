package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store/redis"
)

// worker is a `sluice queue work` process whose handler prints each id.
type worker struct {
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	done    chan struct{}
	mu      sync.Mutex
	handled []string
}

func startWorker(t *testing.T, url, name string, extra ...string) *worker {
	t.Helper()
	args := append([]string{"queue", "work", "--store", url, "--visibility", "1s"}, extra...)
	args = append(args, name, "--", "sh", "-c", `echo "$SLUICE_ENTRY_ID"`)
	w := &worker{cmd: exec.Command(sluiceBin, args...), done: make(chan struct{})}
	w.cmd.Stderr = &w.stderr
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.handled = append(w.handled, sc.Text())
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.cmd.Process.Kill(); w.cmd.Wait() })
	return w
}

// TestQueueNoLoss: 8 producers admit 3,000 entries into a queue of
// capacity 500 (retrying when it is full) while three `sluice queue work`
// processes drain it; one worker is killed with SIGKILL mid-run (after 600
// acks). Every admitted id is handled at least once, nothing stays queued
// or pending, and the duplicates are counted. (It took 10,000 entries, a
// process each: 130 s of CPU, over a quarter of the suite's tests, to show
// no more than 3,000 do: the queue fills and drains six times over and the
// kill lands mid-run all the same.)
func TestQueueNoLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process per entry")
	}
	rd := redistest.Start(t)
	ctx := context.Background()
	st, err := redis.Open(ctx, rd.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, err := queue.Open(ctx, st, "jobs", queue.Options{Capacity: 500})
	if err != nil {
		t.Fatal(err)
	}
	workers := []*worker{startWorker(t, rd.URL(), "jobs"), startWorker(t, rd.URL(), "jobs"), startWorker(t, rd.URL(), "jobs")}

	const total, producers = 3000, 8
	var admitted sync.Map
	var wg sync.WaitGroup
	var fulls int64
	var fullMu sync.Mutex
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/producers; {
				a, err := q.Add(ctx, map[string]string{"p": strconv.Itoa(p), "i": strconv.Itoa(i)}, "")
				var full *queue.FullError
				if errors.As(err, &full) {
					fullMu.Lock()
					fulls++
					fullMu.Unlock()
					time.Sleep(min(max(full.Wait, time.Millisecond), 50*time.Millisecond))
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				admitted.Store(a.ID, true)
				i++
			}
		}()
	}

	// A hang detector: the run takes seconds on an idle machine, and
	// minutes on a busy one, where a process per entry is slow to start.
	deadline := time.Now().Add(5 * time.Minute)
	waitFor := func(what string, ok func(queue.Stats) bool) queue.Stats {
		for {
			s, err := q.Stats(ctx)
			if err == nil && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %+v %v", what, s, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("600 acked", func(s queue.Stats) bool { return s.Acked >= 600 })
	if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s := waitFor("the queue drained", func(s queue.Stats) bool { return s.Length == 0 && s.Pending == 0 })
	for _, w := range workers[1:] {
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	handled := map[string]int{}
	lines := 0
	for i, w := range workers {
		<-w.done
		err := w.cmd.Wait()
		if i > 0 && err != nil {
			t.Fatalf("worker %d after SIGTERM: %v\n%s", i, err, w.stderr.String())
		}
		for _, id := range w.handled {
			handled[id]++
			lines++
		}
	}
	n := 0
	admitted.Range(func(k, _ any) bool {
		n++
		if handled[k.(string)] == 0 {
			t.Errorf("entry %s admitted, never handled", k)
		}
		return true
	})
	if n != total || s.Admitted != total {
		t.Fatalf("admitted %d ids, stats say %d; want %d", n, s.Admitted, total)
	}
	var counts []map[string]int64
	for _, w := range workers[1:] {
		var c map[string]int64
		line := strings.TrimSpace(w.stderr.String())
		if err := json.Unmarshal([]byte(line[strings.LastIndex(line, "\n")+1:]), &c); err != nil {
			t.Fatalf("worker report %q: %v", line, err)
		}
		counts = append(counts, c)
	}
	t.Logf("%d admitted (%d refusals while full), %d handler runs, %d duplicates; live workers reported %v; stats %+v",
		n, fulls, lines, lines-len(handled), counts, s)
}

// TestQueueCLI: add prints ids and exits 1 with the length when full;
// stats prints JSON; a worker given SIGTERM mid-entry finishes and acks
// it, then exits 0; a failing command dead-letters the entry.
func TestQueueCLI(t *testing.T) {
	rd := redistest.Start(t)
	url := rd.URL()
	sluice := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(sluiceBin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	for i := range 2 {
		out, _, err := sluice("queue", "add", "--store", url, "--capacity", "2", "slow", "n="+strconv.Itoa(i))
		if err != nil || !strings.Contains(out, "-") {
			t.Fatalf("add %d: %q %v", i, out, err)
		}
	}
	_, errOut, err := sluice("queue", "add", "--store", url, "--capacity", "2", "slow", "n=2")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut, "length 2") {
		t.Fatalf("add to a full queue: %v %q", err, errOut)
	}
	if _, errOut, err := sluice("queue", "add", "slow"); err == nil || !strings.Contains(errOut, "--store redis://") {
		t.Fatalf("add without a Redis store: %v %q", err, errOut)
	}

	// SIGTERM while the first entry is in hand (its command has started
	// and waits for the test's "go"): the worker finishes it, and takes no
	// other.
	marks := t.TempDir()
	cmd := exec.Command(sluiceBin, "queue", "work", "--store", url, "slow", "--", "sh", "-c",
		`touch "$0/$SLUICE_ENTRY_ID"; cat; while [ ! -e "$0/go" ]; do sleep 0.01; done; echo " $SLUICE_ENTRY_ID"`, marks)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if es, _ := os.ReadDir(marks); len(es) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker after SIGTERM: %v\n%s", err, errb.String())
	}
	if !strings.HasPrefix(out.String(), `{"n":"0"} `) || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("worker output %q: want the first entry's fields and id only", out.String())
	}
	statsOut, _, err := sluice("queue", "stats", "--store", url, "slow")
	var s queue.Stats
	if err != nil || json.Unmarshal([]byte(statsOut), &s) != nil || s.Length != 1 || s.Acked != 1 || s.Capacity != 2 {
		t.Fatalf("stats %q %v", statsOut, err)
	}

	fail := exec.Command(sluiceBin, "queue", "work", "--store", url, "--max-deliveries", "1", "slow", "--", "sh", "-c", "echo broken >&2; exit 3")
	var ferr bytes.Buffer
	fail.Stderr = &ferr
	fail.Stdout = io.Discard
	if err := fail.Start(); err != nil {
		t.Fatal(err)
	}
	// Until the entry is dead-lettered and gone from the queue: two steps
	// (dead letter first, so that nothing is lost), which a stats call may
	// fall between on a busy machine. Bounded by the test's own timeout,
	// not a deadline here.
	for s.DeadLetters == 0 || s.Length != 0 {
		time.Sleep(50 * time.Millisecond)
		statsOut, _, _ = sluice("queue", "stats", "--store", url, "slow")
		json.Unmarshal([]byte(statsOut), &s)
	}
	fail.Process.Signal(syscall.SIGTERM)
	fail.Wait()
	if s.DeadLetters != 1 || s.Length != 0 {
		t.Fatalf("after a failing command: %+v\n%s", s, ferr.String())
	}
}

// TestQueueWorkTimeouts: a command that hangs past --handler-timeout is
// stopped and its delivery failed (dead-lettered with --max-deliveries 1),
// its failure logged with the entry id; SIGTERM stops the command in hand
// after --shutdown-timeout, leaves its entry pending, and exits 0 without
// waiting for the command (it once waited 10.8 s for `sleep 30`).
func TestQueueWorkTimeouts(t *testing.T) {
	rd := redistest.Start(t)
	url := rd.URL()
	sluice := func(args ...string) string {
		out, err := exec.Command(sluiceBin, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	stats := func(name string) queue.Stats {
		var s queue.Stats
		if err := json.Unmarshal([]byte(sluice("queue", "stats", "--store", url, name)), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	id := sluice("queue", "add", "--store", url, "--capacity", "10", "hang", "n=1")
	w := exec.Command(sluiceBin, "queue", "work", "--store", url, "--visibility", "1m", "--handler-timeout", "200ms",
		"--max-deliveries", "1", "hang", "--", "sleep", "30")
	var werr bytes.Buffer
	w.Stderr = &werr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	for stats("hang").DeadLetters == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	w.Process.Signal(syscall.SIGTERM)
	if err := w.Wait(); err != nil {
		t.Fatalf("worker: %v\n%s", err, werr.String())
	}
	if log := werr.String(); !strings.Contains(log, "handler timed out after 200ms") || !strings.Contains(log, "entry="+id) {
		t.Errorf("the timeout was not logged with entry %s:\n%s", id, log)
	}

	dir := t.TempDir()
	sluice("queue", "add", "--store", url, "--capacity", "10", "long", "n=1")
	d := exec.Command(sluiceBin, "queue", "work", "--store", url, "--visibility", "1h", "--shutdown-timeout", "100ms",
		"long", "--", "sh", "-c", `touch "$0/started"; sleep 30; touch "$0/finished"`, dir)
	var derr bytes.Buffer
	d.Stderr = &derr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Fatalf("worker after SIGTERM: %v\n%s", err, derr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "finished")); err == nil {
		t.Fatal("the worker waited for its command to finish")
	}
	if s := stats("long"); s.Length != 1 || s.Pending != 1 || s.Acked != 0 || s.DeadLetters != 0 {
		t.Fatalf("after the bounded drain: %+v, want the entry pending", s)
	}
	if !strings.Contains(derr.String(), "shutdown timeout") {
		t.Errorf("the stop was not logged:\n%s", derr.String())
	}
}

// TestQueueDefinitionAndDeadLetters: `queue add` without --capacity keeps
// the queue's capacity (it once reset it to 1000, past the 2 the service
// was configured with), and with another one is refused; a misspelled
// name is an error for every command; dead letters are listed, shown,
// requeued and dropped.
func TestQueueDefinitionAndDeadLetters(t *testing.T) {
	rd := redistest.Start(t)
	url := rd.URL()
	sluice := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		cmd := exec.Command(sluiceBin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	if out, errOut, code := sluice("queue", "define", "--store", url, "--capacity", "2", "jobs"); code != 0 || out != "jobs: capacity 2\n" {
		t.Fatalf("define: %d %q %q", code, out, errOut)
	}
	for i := range 2 {
		if _, errOut, code := sluice("queue", "add", "--store", url, "jobs", "n="+strconv.Itoa(i)); code != 0 {
			t.Fatalf("add %d: %d %s", i, code, errOut)
		}
	}
	if _, errOut, code := sluice("queue", "add", "--store", url, "jobs", "n=2"); code != 1 || !strings.Contains(errOut, "is full: length 2") {
		t.Fatalf("add to the full queue: %d %s", code, errOut)
	}
	if _, errOut, code := sluice("queue", "add", "--store", url, "--capacity", "1000", "jobs", "n=2"); code != 1 || !strings.Contains(errOut, "it holds 2, not 1000") {
		t.Fatalf("add with another capacity: %d %s", code, errOut)
	}
	for _, args := range [][]string{{"stats"}, {"add"}, {"work"}, {"dead", "list"}} {
		cmd := append(append([]string{"queue"}, args...), "--store", url, "jbos")
		if args[0] == "add" {
			cmd = append(cmd, "n=1")
		}
		if args[0] == "work" {
			cmd = append(cmd, "--", "true")
		}
		if _, errOut, code := sluice(cmd...); code != 1 || !strings.Contains(errOut, `queue "jbos": no such queue`) || !strings.Contains(errOut, "sluice queue define") {
			t.Errorf("%v on a misspelled queue: %d %s", args, code, errOut)
		}
	}
	if n, _ := rd.Do("EXISTS", "sluice:{queue:jbos}", "sluice:{queue:jbos}:meta"); n != "0" {
		t.Errorf("a misspelled name created %s keys", n)
	}

	// Two dead letters: requeue one, drop the other.
	w := exec.Command(sluiceBin, "queue", "work", "--store", url, "--max-deliveries", "1", "jobs", "--", "sh", "-c", "exit 3")
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var s queue.Stats
	for s.DeadLetters < 2 {
		time.Sleep(20 * time.Millisecond)
		out, _, _ := sluice("queue", "stats", "--store", url, "jobs")
		json.Unmarshal([]byte(out), &s)
	}
	w.Process.Signal(syscall.SIGTERM)
	w.Wait()
	out, errOut, code := sluice("queue", "dead", "list", "--store", url, "jobs")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("dead list: %d %q %s", code, out, errOut)
	}
	var dl struct {
		DeadID string            `json:"dead_id"`
		Fields map[string]string `json:"fields"`
		Error  string            `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &dl); err != nil || dl.DeadID == "" || dl.Fields["n"] != "0" || !strings.Contains(dl.Error, "exit status 3") {
		t.Fatalf("dead letter %s: %v", lines[0], err)
	}
	if out, _, code := sluice("queue", "dead", "show", "--store", url, "jobs", dl.DeadID); code != 0 || strings.TrimSpace(out) != lines[0] {
		t.Errorf("dead show: %d %q", code, out)
	}
	if out, errOut, code := sluice("queue", "dead", "requeue", "--store", url, "jobs", dl.DeadID); code != 0 || !strings.Contains(out, dl.DeadID+": requeued as ") {
		t.Errorf("dead requeue: %d %q %s", code, out, errOut)
	}
	json.Unmarshal([]byte(lines[1]), &dl)
	if out, errOut, code := sluice("queue", "dead", "drop", "--store", url, "jobs", dl.DeadID); code != 0 || out != dl.DeadID+": dropped\n" {
		t.Errorf("dead drop: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := sluice("queue", "dead", "drop", "--store", url, "jobs", dl.DeadID); code != 1 || !strings.Contains(errOut, "no such dead letter") {
		t.Errorf("dead drop again: %d %s", code, errOut)
	}
	out, _, _ = sluice("queue", "stats", "--store", url, "jobs")
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Length != 1 || s.DeadLetters != 0 || s.Capacity != 2 {
		t.Errorf("stats after: %s", out)
	}
}

// TestQueueHandlerDiesWithItsWorker: a `sluice queue work` SIGKILLed while
// its handler runs takes the handler with it, the shell and the shell's
// child both (they once ran on, beside the redelivery of their entry to a
// second worker).
func TestQueueHandlerDiesWithItsWorker(t *testing.T) {
	rd := redistest.Start(t)
	url := rd.URL()
	if out, err := exec.Command(sluiceBin, "queue", "add", "--store", url, "--capacity", "10", "long", "n=1").CombinedOutput(); err != nil {
		t.Fatalf("add: %v %s", err, out)
	}
	dir := t.TempDir()
	w := exec.Command(sluiceBin, "queue", "work", "--store", url, "--visibility", "1h", "long", "--",
		"sh", "-c", `sleep 3600 & echo "$! $$" > "$0/pids.tmp"; mv "$0/pids.tmp" "$0/pids"; wait`, dir)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var data []byte
	for {
		var err error
		if data, err = os.ReadFile(filepath.Join(dir, "pids")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids %q", data)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 || !alive(pids[0]) || !alive(pids[1]) {
		t.Fatalf("the handler and its child (%v) are not running", pids)
	}
	w.Process.Kill()
	w.Wait()
	// The guard kills them within milliseconds; 20 s is a margin for a
	// busy machine, and far less than the hour they would run.
	for start := time.Now(); alive(pids[0]) || alive(pids[1]); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			syscall.Kill(pids[0], syscall.SIGKILL)
			syscall.Kill(pids[1], syscall.SIGKILL)
			t.Fatalf("the handler (pid %d) or its child (pid %d) still ran 20 s after its worker was killed", pids[1], pids[0])
		}
	}
}

// alive reports whether process pid runs (a zombie has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestHandlerHeldUntilGuarded: a handler starts stopped at its first
// instruction (traced), so that it runs nothing, and starts no child the
// guard would not know of, until the worker has told the guard of its
// group and releases it.
func TestHandlerHeldUntilGuarded(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mark := filepath.Join(t.TempDir(), "ran")
	cmd, held, err := startHeld(func() *exec.Cmd {
		c := exec.Command("sh", "-c", `: > "$0"`, mark)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return c
	})
	if err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Skip("this system does not let a process trace its child (EPERM): handlers start unheld here")
	}
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] != 't' {
		t.Fatalf("the held handler is not in a tracing stop: %s", stat)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatalf("the held handler ran: %v", err)
	}
	if err := release(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the released handler did not run: %v", err)
	}
}
