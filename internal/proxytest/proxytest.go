// Package proxytest starts the real programs that sit next to Sluice in
// tests: Debian's nginx and caddy in front of it, prometheus scraping
// it, and chromium opening the pages it writes. Each runs on 127.0.0.1 on a free port, in the test's temporary
// directory, and is stopped by its PID when the test ends. A program that
// is not installed fails the test with the package to install.
// DecisionJSON reads the decision JSON Sluice answers with, for the tests
// of the service and of the binary.
package proxytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A Process is one running program.
type Process struct {
	// Addr is where it listens (host:port), Dir its working directory.
	Addr, Dir string
	cmd       *exec.Cmd
	exited    chan struct{}
	log       string
}

// FreeAddr returns 127.0.0.1 and a port the kernel says is free.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	p, err := redistest.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// Start runs argv in dir (with env added to the environment) and returns
// once addr accepts connections. It has no deadline of its own: if the
// program neither listens nor exits, the test's own timeout ends it. The
// program's output goes to dir/output.log, which a failure quotes.
func Start(tb testing.TB, dir, addr string, env []string, argv ...string) *Process {
	tb.Helper()
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		tb.Fatalf("proxytest: %s is not installed (apt-get install -y %s): %v", argv[0], pkgOf(argv[0]), err)
	}
	logPath := filepath.Join(dir, "output.log")
	log, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("proxytest: start %s: %v", argv[0], err)
	}
	p := &Process{Addr: addr, Dir: dir, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); close(p.exited) }()
	tb.Cleanup(p.Stop)
	for {
		select {
		case <-p.exited:
			tb.Fatalf("proxytest: %s exited before it listened on %s:\n%s", argv[0], addr, p.Output())
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pkgOf(bin string) string {
	if bin == "nginx" {
		return "nginx-light"
	}
	return bin
}

// Output is what the program has written so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.log)
	return strings.TrimSpace(string(b))
}

// Stop kills the program by its PID and waits for it to exit. It is safe
// to call more than once.
func (p *Process) Stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// Nginx starts nginx with site, a configuration of the http context (the
// server blocks a user puts in /etc/nginx/conf.d/), that listens on addr.
// The process is nginx's single process (master_process off), its
// temporary files and logs in the test's directory.
func Nginx(tb testing.TB, site, addr string) *Process {
	tb.Helper()
	dir := tb.TempDir()
	main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/site.conf;
}
`, dir)
	write(tb, filepath.Join(dir, "nginx.conf"), main)
	write(tb, filepath.Join(dir, "site.conf"), site)
	return Start(tb, dir, addr, nil, "nginx", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
}

// Caddy starts caddy with a Caddyfile whose site listens on addr, its
// data and configuration in the test's directory.
func Caddy(tb testing.TB, caddyfile, addr string) *Process {
	tb.Helper()
	dir := tb.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	write(tb, path, caddyfile)
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	return Start(tb, dir, addr, env, "caddy", "run", "--config", path, "--adapter", "caddyfile")
}

// Prometheus starts prometheus with the configuration promYAML, listening
// on addr, its database in the test's directory.
func Prometheus(tb testing.TB, promYAML, addr string) *Process {
	tb.Helper()
	dir := tb.TempDir()
	path := filepath.Join(dir, "prometheus.yml")
	write(tb, path, promYAML)
	return Start(tb, dir, addr, nil, "prometheus", "--config.file="+path,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
}

// Chromium runs Debian's chromium headless on url with args (such as
// --dump-dom, or --screenshot=FILE) and returns what it printed. It fails
// the test when chromium fails, or has not finished in 90 s.
func Chromium(tb testing.TB, url string, args ...string) (stdout, stderr string) {
	tb.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		tb.Fatalf("chromium is not installed (apt-get install -y chromium; test.sh does): %v", err)
	}
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + tb.TempDir(), "--enable-logging=stderr", "--v=0"}, args...)
	cmd := exec.Command(bin, append(args, url)...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			tb.Fatalf("chromium: %v\n%s", err, e.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		tb.Fatal("chromium did not finish in 90s")
	}
	return o.String(), e.String()
}

func write(tb testing.TB, path, s string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		tb.Fatal(err)
	}
}
