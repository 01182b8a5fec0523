package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// guardName is the name (argv[0]) under which sluice runs as a queue
// handler's guard: `sluice queue work` starts each handler through it,
// so that a handler never outlives its worker.
//
// The guard leads the handler's process group and holds the read end of
// a pipe (fd 3) whose write end only the worker holds. When the worker
// dies, however it dies (SIGKILL too), the kernel closes that end; the
// guard reads EOF and kills the whole group, itself included, so that the
// entry's redelivery to another worker never runs beside it. The guard
// ignores SIGTERM (the worker's stop, sent to the group), waits for the
// handler and exits as it did.
const guardName = "sluice-queue-guard"

// runGuard runs argv as the guarded handler and returns its exit code.
func runGuard(argv []string) int {
	// Only as the worker starts it: leading its own group (which it
	// kills), fd 3 a pipe.
	var st syscall.Stat_t
	if len(argv) == 0 || syscall.Getpgrp() != os.Getpid() || syscall.Fstat(3, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		fmt.Fprintln(os.Stderr, guardName+": started by `sluice queue work` only")
		return 2
	}
	worker := os.NewFile(3, "worker")
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT) // handled, so not inherited as ignored
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 127
	}
	go func() {
		io.Copy(io.Discard, worker) // EOF: the worker has gone, or stops us
		syscall.Kill(0, syscall.SIGKILL)
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}
