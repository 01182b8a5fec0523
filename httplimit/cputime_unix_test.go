//go:build unix

package httplimit_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system, every thread) this process
// has used: a cost measure that other processes on a busy machine disturb
// far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
