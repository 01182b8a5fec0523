package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSystemdUnit checks docs/deploy/sluice.service with the real
// `systemd-analyze verify` (its ExecStart pointed at the test's binary),
// which must have nothing to say of it, then runs the unit's ExecStart
// and reloads it as its ExecReload does (SIGHUP).
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile("../../docs/deploy/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	var start, reload string
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			start = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "ExecReload="); ok {
			reload = v
		}
	}
	argv := strings.Fields(start)
	if len(argv) < 2 || argv[0] != "/usr/local/bin/sluice" || argv[1] != "serve" || reload != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("ExecStart=%s, ExecReload=%s", start, reload)
	}
	if analyze, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze is not installed here: the unit is not verified")
	} else {
		path := filepath.Join(t.TempDir(), "sluice.service")
		if err := os.WriteFile(path, []byte(strings.Replace(unit, "ExecStart=/usr/local/bin/sluice", "ExecStart="+sluiceBin, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || strings.Contains(string(out), "sluice.service") {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	// The unit's command, with its config (docs/deploy/sluice.yaml, which
	// it names in /etc/sluice) moved to the test's ports and policy.
	cfg := strings.Replace(argv[len(argv)-1], "/etc/sluice/", "../../docs/deploy/", 1)
	if _, err := os.Stat(cfg); err != nil {
		t.Fatalf("the unit's config: %v", err)
	}
	cmd := exec.Command(sluiceBin, append(argv[1:len(argv)-1], cfg)...)
	cmd.Env = append(os.Environ(), "SLUICE_HTTP=127.0.0.1:0", "SLUICE_GRPC=127.0.0.1:0", "SLUICE_POLICY=limits.example.yaml")
	p := serveCmd(t, cmd)
	if a := p.check(`{"path": ["user", "alex", "trade"]}`); a.status != 200 {
		t.Errorf("a check: %d %s", a.status, a.body)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("policy reloaded")
}
