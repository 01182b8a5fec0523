package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pkitest"
)

const drainPolicy = "schema: {user: {limits: [{algorithm: fixed_window, limit: 1000, window: 1h}]}}\n"

// drainServer is a server on 127.0.0.1 whose drain may take minutes: a
// test that sees Serve return has seen the drain end of itself. ln, if not
// nil, wraps its HTTP listener.
func drainServer(t *testing.T, httpTLS TLSConfig, ln func(net.Listener) net.Listener) (s *Server, shutdown func(), served <-chan error) {
	t.Helper()
	s, err := New(context.Background(), Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "off",
		PolicyData: []byte(drainPolicy), Timeout: testTimeout, ShutdownTimeout: 2 * time.Minute, HTTPTLS: httpTLS},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if ln != nil {
		s.httpLn = ln(s.httpLn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, nil) }()
	t.Cleanup(func() { cancel(); s.Close() })
	// shutdown begins the drain and returns once the listener is closed.
	return s, func() {
		t.Helper()
		cancel()
		for deadline := time.Now().Add(testTimeout); ; time.Sleep(10 * time.Millisecond) {
			c, err := net.DialTimeout("tcp", s.HTTPAddr(), time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("the listener is still open after shutdown began")
			}
		}
	}, done
}

// TestDrainOverTLS: connections idle after a request, over HTTP/2 and
// HTTP/1.1, and one that sent nothing, do not keep the HTTPS listener's
// drain waiting: it ends with all of them open at the client's end,
// though it may take minutes, and closes each.
func TestDrainOverTLS(t *testing.T) {
	pki := pkitest.New(t)
	cert, key, _ := pki.Issue(t, "server", true)
	s, shutdown, served := drainServer(t, TLSConfig{CertFile: cert, KeyFile: key}, nil)
	addr := s.HTTPAddr()
	roots := x509.NewCertPool()
	roots.AddCert(pki.CA)
	const body = `{"path": ["user"]}`
	idle := map[string]*http.Client{}
	for _, proto := range []string{"h2", "http/1.1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2"}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		resp, err := c.Post("https://"+addr+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS.NegotiatedProtocol != proto {
			t.Fatalf("%s: %d over %q", proto, resp.StatusCode, resp.TLS.NegotiatedProtocol)
		}
		idle[proto] = c
	}
	bare, err := net.Dial("tcp", addr) // sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	shutdown()
	select { // a hang detector: the drain's bound is two minutes
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the drain waited for idle connections")
	}
	if n, err := bare.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection that sent nothing: read %d bytes, %v; want EOF", n, err)
	}
	for proto, c := range idle {
		if _, err := c.Post("https://"+addr+"/v1/check", "application/json", strings.NewReader(body)); err == nil {
			t.Errorf("%s: answered after shutdown", proto)
		}
	}
}
