package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// guardName is the name (argv[0]) under which sluice runs as a queue
// worker's guard, so that no handler outlives its worker.
//
// `sluice queue work` starts one guard, and each handler in a process
// group of its own. It tells the guard, through a pipe (the guard's fd 3)
// whose write end only the worker holds, each group it starts ("+pgid")
// and each that ended ("-pgid"). When the worker dies, however it dies
// (SIGKILL too), the kernel closes that end: the guard reads EOF, kills
// every group still listed, and exits, so that an entry's redelivery to
// another worker never runs beside its first run. A handler is held
// stopped at its first instruction until the guard has heard of its group
// (startHeld), and gets SIGKILL when the thread that started it ends
// (Pdeathsig): a worker that dies in between leaves nothing running.
const guardName = "sluice-queue-guard"

// startHeld starts the command newCmd makes, held stopped at its first
// instruction (traced, PTRACE_TRACEME: it stops when it execs) so that it
// can start nothing before release; held is false when the system refuses
// to trace (EPERM, as some container sandboxes do): then it runs at once,
// and a child it starts before the guard hears of its group may outlive a
// worker killed in that moment. The caller's thread is locked: it is the
// tracer.
func startHeld(newCmd func() *exec.Cmd) (cmd *exec.Cmd, held bool, err error) {
	cmd = newCmd()
	cmd.SysProcAttr.Ptrace = true
	if err = cmd.Start(); errors.Is(err, syscall.EPERM) {
		cmd = newCmd()
		return cmd, false, cmd.Start()
	}
	if err != nil {
		return nil, false, err
	}
	// The exec's stop: the command has run nothing of its own yet.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, false, fmt.Errorf("a handler did not stop at its start: %v %v", ws, err)
	}
	return cmd, true, nil
}

// release lets a command startHeld held run: it is no longer traced.
func release(cmd *exec.Cmd) error { return syscall.PtraceDetach(cmd.Process.Pid) }

// runGuard is the guard's main.
func runGuard() int {
	var st syscall.Stat_t
	if syscall.Fstat(3, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		fmt.Fprintln(os.Stderr, guardName+": started by `sluice queue work` only")
		return 2
	}
	// A ^C or SIGTERM to the worker's group is the worker's to handle: the
	// guard ends when the worker does.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT)
	groups := map[int]bool{}
	sc := bufio.NewScanner(os.NewFile(3, "worker"))
	for sc.Scan() {
		line := sc.Text()
		pgid, err := strconv.Atoi(line[min(1, len(line)):])
		if err != nil || pgid <= 1 {
			continue
		}
		if line[0] == '+' {
			groups[pgid] = true
		} else {
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return 0
}

// A guard is a worker's end of its guard.
type guard struct {
	mu   sync.Mutex
	live *os.File // the pipe's write end
	cmd  *exec.Cmd
}

// startGuard starts the guard, self being this binary.
func startGuard(self string) (*guard, error) {
	watch, live, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer watch.Close()
	cmd := exec.Command(self)
	cmd.Args[0] = guardName
	cmd.ExtraFiles = []*os.File{watch}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		live.Close()
		return nil, fmt.Errorf("starting the handlers' guard: %w", err)
	}
	return &guard{live: live, cmd: cmd}, nil
}

// tell sends the guard a line: "+pgid" for a group started, "-pgid" for
// one that ended.
func (g *guard) tell(op byte, pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live.Write(strconv.AppendInt([]byte{op}, int64(pgid), 10))
	g.live.Write([]byte{'\n'})
}

// close ends the guard: it kills the groups still running, and exits.
func (g *guard) close() {
	g.live.Close()
	g.cmd.Wait()
}
