// Package redistest starts real redis-server processes for tests: on
// 127.0.0.1, on a free port, without persistence, stopped by PID when the
// test ends.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr   string // host:port
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a redis-server for the test and stops it when the test ends.
// Extra arguments are appended to the command line (e.g. "--maxmemory",
// "10mb"). The test fails if redis-server is not installed.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		s, err := start(bin, tb.TempDir(), port, args)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

// StartOn starts a redis-server on the given port for the test and stops
// it when the test ends.
func StartOn(tb testing.TB, port int, args ...string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	s, err := start(bin, tb.TempDir(), port, args)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(bin, dir string, port int, args []string) (*Server, error) {
	return startWith(bin, dir, port, "", args)
}

// startWith starts redis-server on port, with a configuration file first
// when conf is not empty (sentinels need one to write to).
func startWith(bin, dir string, port int, conf string, args []string) (*Server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var argv []string
	if conf != "" {
		argv = append(argv, conf)
	}
	argv = append(argv,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	if conf == "" {
		argv = append(argv, "--save", "", "--appendonly", "no")
	}
	argv = append(argv, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Dir = dir
	log, err := os.Create(dir + "/redis.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s := &Server{Addr: addr, cmd: cmd, exited: exited}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			out, _ := os.ReadFile(dir + "/redis.log")
			return nil, fmt.Errorf("redis-server on %s exited: %s", addr, strings.TrimSpace(string(out)))
		default:
		}
		if err := ping(addr); err == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s", addr)
}

// Stop kills the server by its PID and waits for it to exit. It is safe to
// call more than once.
func (s *Server) Stop() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// Pause stops the server (SIGSTOP): it reads and answers nothing, its
// connections open, until resume (SIGCONT), which also runs when the test
// ends and may be called more than once.
func (s *Server) Pause(t testing.TB) (resume func()) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { s.cmd.Process.Signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Do sends one command over a fresh connection and returns the raw RESP
// reply's first line plus any bulk payload, for test set-up and inspection
// without a client library.
func (s *Server) Do(args ...string) (string, error) { return do(s.Addr, args...) }

func ping(addr string) error {
	r, err := do(addr, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

// send dials addr, writes one command and hands the reply's reader to
// read, within 5 seconds.
func send(addr string, args []string, read func(rd *bufio.Reader) error) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return err
	}
	return read(bufio.NewReader(c))
}

// readLine reads a line of a reply, without its CRLF.
func readLine(rd *bufio.Reader) (string, error) {
	l, err := rd.ReadString('\n')
	return strings.TrimRight(l, "\r\n"), err
}

// readBulk reads the n bytes and CRLF of a bulk string whose header said
// n, or for a null one (n < 0) nothing.
func readBulk(rd *bufio.Reader, n int) (string, error) {
	if n < 0 {
		return "", nil
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(rd, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// doArray sends one command and reads a flat array reply (of bulk
// strings and integers), such as SENTINEL MASTER's.
func doArray(addr string, args ...string) (out []string, err error) {
	err = send(addr, args, func(rd *bufio.Reader) error {
		head, err := readLine(rd)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(head, "*") {
			return fmt.Errorf("not an array: %q", head)
		}
		n, _ := strconv.Atoi(head[1:])
		out = make([]string, 0, max(n, 0))
		for range max(n, 0) {
			l, err := readLine(rd)
			if err != nil {
				return err
			}
			switch {
			case strings.HasPrefix(l, "$"):
				size, _ := strconv.Atoi(l[1:])
				v, err := readBulk(rd, size)
				if err != nil {
					return err
				}
				out = append(out, v)
			case len(l) > 0:
				out = append(out, l[1:])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func do(addr string, args ...string) (reply string, err error) {
	err = send(addr, args, func(rd *bufio.Reader) error {
		line, err := readLine(rd)
		switch {
		case err != nil:
			return err
		case line == "":
			return fmt.Errorf("empty reply")
		case line[0] == '-':
			return fmt.Errorf("redis: %s", line[1:])
		case line[0] == '$':
			n, _ := strconv.Atoi(line[1:])
			reply, err = readBulk(rd, n)
			return err
		}
		reply = line[1:]
		return nil
	})
	return reply, err
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
