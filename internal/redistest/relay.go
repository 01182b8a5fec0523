package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// A Relay passes TCP connections on to an address, and can cut them all:
// a client of Redis through it dials anew, to a Redis that may be stopped.
type Relay struct {
	Addr   string // host:port to connect to
	dialed atomic.Int64
	mu     sync.Mutex
	open   []net.Conn
}

// NewRelay starts a Relay to addr, stopped when the test ends.
func NewRelay(t testing.TB, addr string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); r.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.open = append(r.open, c, u)
			r.mu.Unlock()
			r.dialed.Add(1)
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return r
}

// Dialed is how many connections the relay has passed on.
func (r *Relay) Dialed() int64 { return r.dialed.Load() }

// Cut closes every connection the relay has passed on.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.open {
		c.Close()
	}
	r.open = nil
}
