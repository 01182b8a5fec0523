package clock

import (
	"bytes"
	"os"
)

// rdtsc returns the CPU's time-stamp counter (tsc_amd64.s).
func rdtsc() uint64

// counterTrusted reports whether the kernel keeps its own clock on the
// time-stamp counter: it does only when the counter runs at a constant
// rate, through sleep states, in step on every CPU (its clocksource
// watchdog moves it off the counter otherwise).
func counterTrusted() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && bytes.Equal(bytes.TrimSpace(b), []byte("tsc"))
}
