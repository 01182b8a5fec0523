package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero: -h and --help print usage and exit 0 on every
// subcommand and on sluice itself; version and --version print the build.
func TestHelpExitsZero(t *testing.T) {
	for name := range commands {
		for _, flag := range []string{"-h", "--help"} {
			out, err := exec.Command(sluiceBin, name, flag).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "usage: sluice "+name) {
				t.Errorf("sluice %s %s: %v\n%s", name, flag, err, out)
			}
		}
	}
	if out, err := exec.Command(sluiceBin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "commands:") {
		t.Errorf("sluice --help: %v %s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(sluiceBin, args...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "sluice ") || !strings.Contains(string(out), "go1.") {
			t.Errorf("sluice %v: %v %q", args, err, out)
		}
	}
	if err := exec.Command(sluiceBin, "replay", "--no-such-flag").Run(); err == nil {
		t.Error("a bad flag exited 0")
	}
}
