// Package machine reads how busy this Linux machine is, so that benchmark
// runs can wait for the rest of the machine to be quiet and report the CPU
// that other processes used meanwhile.
package machine

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const clockTicks = 100 // USER_HZ on Linux

// Busy returns the CPU time all cores have spent busy since boot, from
// /proc/stat (steal, the time the hypervisor gave to others, counts as busy).
func Busy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

// ProcCPU returns a process's user+system CPU time, from /proc.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	s = s[strings.LastIndexByte(s, ')')+2:]
	f := strings.Fields(s)
	if len(f) < 13 { // f[0] is field 3 (state); utime is 14, stime 15
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// SelfCPU is this process's CPU time.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RusageCPU is the CPU time in a child's rusage (os.ProcessState.SysUsage).
func RusageCPU(u any) time.Duration {
	if ru, ok := u.(*syscall.Rusage); ok {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return 0
}

// WaitQuiet waits, for at most max, until the machine is nearly idle: under
// 15% of one core busy over 250ms. It reports whether it got there.
func WaitQuiet(max time.Duration) bool {
	deadline := time.Now().Add(max)
	for {
		b0, t0 := Busy(), time.Now()
		time.Sleep(250 * time.Millisecond)
		if float64(Busy()-b0) < 0.15*float64(time.Since(t0)) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
