package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/machine"
)

var (
	procCPU     = machine.ProcCPU
	machineBusy = machine.Busy
	selfCPU     = machine.SelfCPU
	waitQuiet   = machine.WaitQuiet
)

// server is a redis-server this program started: on 127.0.0.1, on a free
// port, without persistence, stopped by its PID.
type server struct {
	addr   string
	port   int
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
}

func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install -y redis-server redis-tools): %w", err)
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := tryStart(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func tryStart(bin string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redisbench-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	cmd.Dir = dir
	logf, err := os.Create(dir + "/redis.log")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and killed with this program if it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, cmd: cmd, dir: dir, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			out, _ := os.ReadFile(dir + "/redis.log")
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on %s exited: %s", s.addr, strings.TrimSpace(string(out)))
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, werr := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if werr == nil && rerr == nil && strings.HasPrefix(line, "+PONG") {
				return s, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr)
}

// stop kills the server by its PID and waits for it. Safe to call twice.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
	os.RemoveAll(s.dir)
}

func (s *server) pid() int { return s.cmd.Process.Pid }
