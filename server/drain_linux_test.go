package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
	c, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"path": ["user"]}`
	req := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
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
