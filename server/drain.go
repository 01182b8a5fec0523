package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// An HTTP listener's drain on shutdown. net/http's Shutdown drops a request
// that it finishes reading after Shutdown began: the connection closes
// unanswered (conn.serve's shutting-down check after readRequest, from
// golang/go#65802), though the request's bytes had arrived, and no client
// retries a POST on a fresh connection. So the drain first
// closes the listener and cuts every HTTP/1 connection's wait for a
// request: each serves what has arrived on it, else closes. Once every
// connection left has its request in a handler that began during the
// drain (whose answer closes it; one that began before may have a request
// pipelined behind it), Shutdown waits for the handlers. HTTP/2 connections are left to Shutdown, whose GOAWAY tells
// the client which streams were not served.

// drainable is an http.Server with its connections' tracker.
type drainable struct {
	*http.Server
	conns *connTracker
}

// connTracker tracks one http.Server's connections for the drain: it is
// the server's listener, ConnState and ConnContext.
type connTracker struct {
	mu       sync.Mutex // guards conns
	conns    map[*trackedConn]struct{}
	draining atomic.Bool
	ln       net.Listener  // the listener it accepts from
	served   chan struct{} // closed when http.Server.Serve has returned
}

// trackedConn is an accepted connection whose wait for a request a drain
// can cut (the drain makes its reads take only what has arrived).
type trackedConn struct {
	net.Conn
	mu       sync.Mutex
	deadline time.Time // the read deadline net/http set
	active   bool      // net/http has read a request on it (StateActive)
	begun    bool      // the request is in its handler
	closes   bool      // its handler began during the drain: the answer closes the connection
	h2, seen bool      // HTTP/2, once its protocol is seen
	stopped  bool      // the drain cut its wait: its read deadline is past
}

// connKey is the request context's key of its *trackedConn.
type connKey struct{}

func newConnTracker(ln net.Listener) *connTracker {
	return &connTracker{conns: map[*trackedConn]struct{}{}, ln: ln, served: make(chan struct{})}
}

// Accept registers each connection before net/http sees it, so that a
// drain that has seen Serve return knows every connection.
func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.ln.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns[tc] = struct{}{}
	if t.draining.Load() {
		tc.mu.Lock()
		tc.stop()
		tc.mu.Unlock()
	}
	return tc, nil
}

func (t *connTracker) Close() error   { return t.ln.Close() }
func (t *connTracker) Addr() net.Addr { return t.ln.Addr() }

// tracked is the *trackedConn under net/http's connection (a *tls.Conn
// over it, or itself).
func tracked(c net.Conn) *trackedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tc, _ := c.(*trackedConn)
	return tc
}

// connState is the http.Server's ConnState: a request read is served
// whole; a connection idle again waits for a request, which a drain cuts;
// a closed one is forgotten.
func (t *connTracker) connState(c net.Conn, st http.ConnState) {
	tc := tracked(c)
	if tc == nil {
		return
	}
	switch st {
	case http.StateActive:
		tc.mu.Lock()
		seen := tc.seen
		tc.mu.Unlock()
		h2 := false
		if tls, ok := c.(*tls.Conn); ok && !seen { // the handshake is over: the protocol is known
			h2 = tls.ConnectionState().NegotiatedProtocol == "h2"
		}
		tc.mu.Lock()
		defer tc.mu.Unlock()
		tc.active = true
		if !seen {
			tc.seen, tc.h2 = true, h2
		}
		if tc.stopped { // its request, or its body, reads as net/http asks
			tc.stopped = false
			tc.Conn.SetReadDeadline(tc.deadline)
		}
	case http.StateIdle:
		tc.mu.Lock()
		defer tc.mu.Unlock()
		tc.active, tc.begun, tc.closes = false, false, false
		if t.draining.Load() { // read under tc.mu: else a drain's stop may pass it by as active
			tc.stop()
		}
	case http.StateClosed, http.StateHijacked:
		t.mu.Lock()
		delete(t.conns, tc)
		t.mu.Unlock()
	}
}

// connContext puts the connection in its requests' context (the
// http.Server's ConnContext).
func (t *connTracker) connContext(ctx context.Context, c net.Conn) context.Context {
	if tc := tracked(c); tc != nil {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// handler notes that a request reached its handler; while draining, an
// HTTP/1 answer closes its connection.
func (t *connTracker) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closes := t.draining.Load()
		if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			tc.mu.Lock()
			closes = t.draining.Load() // read under tc.mu: else a drain's wait may pass it by
			tc.begun, tc.closes = true, closes
			tc.mu.Unlock()
		}
		if closes && r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// drain cuts every connection's wait for a request, closes the listener
// and waits until each HTTP/1 connection left has its request in a
// handler that closes it, or ctx is done.
func (t *connTracker) drain(ctx context.Context) {
	t.mu.Lock()
	t.draining.Store(true)
	for tc := range t.conns {
		tc.mu.Lock()
		tc.stop()
		tc.mu.Unlock()
	}
	t.mu.Unlock()
	t.ln.Close()
	select {
	case <-t.served: // every connection accepted is registered, and cut
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for t.waiting() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// waiting reports whether an HTTP/1 connection is open without its
// request in a handler that began during the drain: one with a request
// read, one cut and not yet closed, or one whose handler began before (a
// request pipelined behind it is read and served once it ends).
func (t *connTracker) waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tc := range t.conns {
		tc.mu.Lock()
		w := !tc.h2 && !(tc.begun && tc.closes)
		tc.mu.Unlock()
		if w {
			return true
		}
	}
	return false
}

// stop cuts the connection's wait for a request (under tc.mu): its read
// deadline goes to the past, and its reads take only what has arrived
// until net/http has read a request. A connection whose request is read,
// or HTTP/2, is left as it is.
func (tc *trackedConn) stop() {
	if tc.active || tc.h2 || tc.stopped {
		return
	}
	tc.stopped = true
	tc.Conn.SetReadDeadline(time.Unix(1, 0))
}

// Read on a connection cut takes what has arrived, if anything, else ends
// the connection with io.EOF, which net/http closes without an answer.
func (tc *trackedConn) Read(p []byte) (int, error) {
	n, err := tc.Conn.Read(p)
	if n > 0 {
		return n, err
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.stopped {
		if n = readArrived(tc.Conn, p); n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
	return n, err
}

// SetReadDeadline keeps net/http's deadline, set on the connection unless
// the drain cut its wait.
func (tc *trackedConn) SetReadDeadline(d time.Time) error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.deadline = d
	if tc.stopped {
		return nil
	}
	return tc.Conn.SetReadDeadline(d)
}

// CloseWrite lets net/http half-close a connection after an answer it
// sent before reading the whole body (a 413), as it does on a TCP
// connection, so the client reads the answer rather than a reset.
func (tc *trackedConn) CloseWrite() error {
	if cw, ok := tc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (tc *trackedConn) SetDeadline(d time.Time) error {
	if err := tc.SetReadDeadline(d); err != nil {
		return err
	}
	return tc.Conn.SetWriteDeadline(d)
}
