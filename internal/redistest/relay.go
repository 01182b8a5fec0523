package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Relay passes TCP connections on to an address, and can cut them all:
// a client of Redis through it dials anew, to a Redis that may be stopped.
// A relay with a delay holds every byte that long in each direction (a
// link between regions); a relay that is down refuses every connection
// until it is up again (a region cut off).
type Relay struct {
	Addr   string // host:port to connect to
	delay  time.Duration
	ln     net.Listener
	dialed atomic.Int64
	down   atomic.Bool
	mu     sync.Mutex
	open   []net.Conn
}

// NewRelay starts a Relay to addr, stopped when the test ends.
func NewRelay(t testing.TB, addr string) *Relay { return NewDelayRelay(t, addr, 0) }

// NewDelayRelay starts a Relay to addr that holds each byte for delay in
// each direction (a round trip of 2 × delay), stopped when the test ends.
func NewDelayRelay(t testing.TB, addr string, delay time.Duration) *Relay {
	t.Helper()
	r, err := ListenRelay("127.0.0.1:0", addr, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// ListenRelay starts a Relay on listen (host:port; port 0 picks one) to
// addr, holding each byte for delay in each direction, until Close: for
// programs (bench/) that link regions outside a test.
func ListenRelay(listen, addr string, delay time.Duration) (*Relay, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	r := &Relay{Addr: ln.Addr().String(), delay: delay, ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if r.down.Load() {
				c.Close()
				continue
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
			go func() { r.copy(u, c); u.Close() }()
			go func() { r.copy(c, u); c.Close() }()
		}
	}()
	return r, nil
}

// Close stops the relay and cuts its connections.
func (r *Relay) Close() {
	r.ln.Close()
	r.Cut()
}

// copy passes src on to dst, each read held for the relay's delay.
func (r *Relay) copy(dst, src net.Conn) {
	if r.delay <= 0 {
		io.Copy(dst, src)
		return
	}
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{time.Now().Add(r.delay), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			for range ch { // let the reader end
			}
			return
		}
	}
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

// Down cuts every connection and refuses new ones until Up.
func (r *Relay) Down() {
	r.down.Store(true)
	r.Cut()
}

// Up accepts connections again after Down.
func (r *Relay) Up() { r.down.Store(false) }
