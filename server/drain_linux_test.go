package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gatedListener stops each connection's reads until open is closed: a
// server slow to read what has arrived, as on a busy machine.
type gatedListener struct {
	net.Listener
	open  chan struct{}
	conns chan *gatedConn
}

type gatedConn struct {
	*net.TCPConn
	open chan struct{}
}

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &gatedConn{c.(*net.TCPConn), l.open}
	l.conns <- g
	return g, nil
}

func (c *gatedConn) Read(p []byte) (int, error) {
	<-c.open
	return c.TCPConn.Read(p)
}

// TestDrainServesWhatArrived: a check whose bytes arrived before the drain
// began, on a server slow to read them, is answered. net/http's Shutdown
// alone closed its connection unanswered (the client saw EOF): it drops a
// request that it finishes reading after Shutdown began (conn.serve's
// shutting-down check after readRequest, from golang/go#65802), which is
// how TestServeSIGTERMDrains once failed.
func TestDrainServesWhatArrived(t *testing.T) {
	gate := &gatedListener{open: make(chan struct{}), conns: make(chan *gatedConn, 1)}
	s, shutdown, _ := drainServer(t, TLSConfig{}, func(ln net.Listener) net.Listener { gate.Listener = ln; return gate })
	c, req := sendChecks(t, s.HTTPAddr(), 1)
	g := <-gate.conns
	for deadline := time.Now().Add(testTimeout); arrived(t, g.TCPConn) < len(req); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the request's %d bytes arrived", arrived(t, g.TCPConn), len(req))
		}
	}
	shutdown()
	close(gate.open) // the server reads the check only now
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the check that arrived before the drain got no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"allowed":true`) || !resp.Close {
		t.Errorf("the check that arrived before the drain: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// sendChecks dials addr and writes n checks in one write; it returns the
// connection (closed when the test ends) and one check's request.
func sendChecks(t *testing.T, addr string, n int) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := `{"path": ["user"]}`
	req := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, strings.Repeat(req, n)); err != nil {
		t.Fatal(err)
	}
	return c, req
}

// arrived is how many bytes have arrived on c unread (SIOCINQ).
func arrived(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ); err != nil {
			t.Fatal(err)
		}
	})
	return n
}

// pipeConn is a connection whose answers wait until written is closed;
// writing has a value once the first answer is waiting (its handler ran).
type pipeConn struct {
	*net.TCPConn
	written chan struct{}
	writing chan struct{}
}

func (c *pipeConn) Write(p []byte) (int, error) {
	select {
	case c.writing <- struct{}{}:
	default:
	}
	<-c.written
	return c.TCPConn.Write(p)
}

type pipeListener struct {
	net.Listener
	written, writing chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pipeConn{c.(*net.TCPConn), l.written, l.writing}, nil
}

// TestDrainServesPipelined: a check pipelined behind one whose handler
// began before the drain is answered too, and the second answer closes
// the connection. The drain used to take the first handler for a request
// Shutdown would wait for, and Shutdown ended the connection after the
// first answer, the second unanswered.
func TestDrainServesPipelined(t *testing.T) {
	pipe := &pipeListener{written: make(chan struct{}), writing: make(chan struct{}, 1)}
	s, shutdown, _ := drainServer(t, TLSConfig{}, func(ln net.Listener) net.Listener { pipe.Listener = ln; return pipe })
	// Both at once: the server reads both in its first read. The first
	// answer waits to be written, once its handler has run.
	c, _ := sendChecks(t, s.HTTPAddr(), 2)
	select {
	case <-pipe.writing:
	case <-time.After(testTimeout):
		t.Fatal("the first check was never answered")
	}
	shutdown()
	close(pipe.written)
	r := bufio.NewReader(c)
	for i := 1; i <= 2; i++ {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("check %d of 2, pipelined before the drain, got no answer: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"allowed":true`) || resp.Close != (i == 2) {
			t.Errorf("check %d of 2: %d %v %s", i, resp.StatusCode, resp.Header, b)
		}
	}
}

// halfListener counts the half-closes of its connections.
type halfListener struct {
	net.Listener
	closeWrites atomic.Int32
}

type halfConn struct {
	*net.TCPConn
	l *halfListener
}

func (c *halfConn) CloseWrite() error { c.l.closeWrites.Add(1); return c.TCPConn.CloseWrite() }

func (l *halfListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &halfConn{c.(*net.TCPConn), l}, nil
}

// TestTrackedHalfCloses: a connection the drain tracks still half-closes
// after a 413 sent before the body was read, as net/http does on a TCP
// connection, so that a client still sending reads the answer rather than
// a reset (the tracked connection hid CloseWrite).
func TestTrackedHalfCloses(t *testing.T) {
	half := &halfListener{}
	s, _, _ := drainServer(t, TLSConfig{}, func(ln net.Listener) net.Listener { half.Listener = ln; return half })
	c, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body of 1,000,000 bytes: %d", resp.StatusCode)
	}
	// net/http half-closes before it closes: a close seen by the client
	// comes after the half-close.
	c.SetReadDeadline(time.Now().Add(testTimeout))
	io.Copy(io.Discard, c)
	if n := half.closeWrites.Load(); n != 1 {
		t.Errorf("%d half-closes after a 413 on a body not read, want 1", n)
	}
}
